// fp8audit: audit FP8 DelayedScaling state updates in training jobs.
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  CLI::App app{"fp8audit " FP8AUDIT_VERSION
               " — counts FP8 DelayedScaling state updates per logical microbatch"};
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", fp8audit::cli::VersionText(),
                       "print the version, the commit, and the CUDA, CUPTI and PyTorch it was "
                       "built with, then exit");
  int exit_code = fp8audit::cli::kExitOk;
  fp8audit::cli::AddModelCommand(app, &exit_code);
  fp8audit::cli::AddRunCommand(app, &exit_code);
  fp8audit::cli::AddReportCommand(app, &exit_code);
  fp8audit::cli::AddCheckCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, then the usage of the (sub)command that failed.
    std::cerr << "fp8audit: " << e.what() << "\n";
    const CLI::App* failed = &app;
    for (const CLI::App* sub : app.get_subcommands()) failed = sub;
    std::cerr << failed->help();
    return fp8audit::cli::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "fp8audit: internal error: " << e.what() << "\n";
    return fp8audit::cli::kExitInternal;
  }
  return exit_code;
}
