// fp8audit: audit FP8 training jobs: DelayedScaling state updates and recomputes, per microbatch.
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/help_examples.h"
#include "cli/usage_error.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  CLI::App app{"fp8audit " FP8AUDIT_VERSION
               " — audits FP8 training per logical microbatch: DelayedScaling state updates "
               "counted, and each recompute checked against its forward, whatever the recipe"};
  app.name("fp8audit");  // usage names the program, not the path it was started by
  app.require_subcommand(1, 1);
  app.formatter(std::make_shared<fp8audit::cli::HelpFormatter>());  // commands added below share it
  app.set_version_flag("--version", fp8audit::cli::VersionText(),
                       "print the version, the commit, and the CUDA, CUPTI and PyTorch it was "
                       "built with, then exit");
  app.footer(fp8audit::cli::WithExamples(
      "`fp8audit COMMAND --help` shows a command's flags, exit codes and examples.",
      {"fp8audit run -- torchrun --nproc-per-node 8 train.py    # audit a job: report on stderr",
       "fp8audit run --fix-te -- torchrun --nproc-per-node 8 train.py  # the same under the fix"}));
  int exit_code = fp8audit::cli::kExitOk;
  fp8audit::cli::AddModelCommand(app, &exit_code);
  fp8audit::cli::AddRunCommand(app, &exit_code);
  fp8audit::cli::AddReportCommand(app, &exit_code);
  fp8audit::cli::AddCheckCommand(app, &exit_code);
  fp8audit::cli::AddCompletionCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, then a hint; a first argument that is no command is named.
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    std::string failed;
    const CLI::App* where = &app;
    for (const CLI::App* sub : app.get_subcommands()) {
      failed = sub->get_name();
      where = sub;
    }
    std::string unknown;
    if (failed.empty() && argc > 1 && argv[1][0] != '-') unknown = argv[1];
    // A mistyped flag is named, with the nearest real one, before whatever the parser says.
    std::vector<std::string> flags;
    for (const CLI::Option* o : where->get_options()) {
      for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
      for (const std::string& n : o->get_snames()) flags.push_back("-" + n);
    }
    std::vector<std::string> rest;  // the arguments after the command's name
    bool past = failed.empty();
    for (int i = 1; i < argc; ++i) {
      if (past) rest.push_back(argv[i]);
      if (!past && argv[i] == failed) past = true;
    }
    std::string what = e.what();
    const bool extras =
        dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || (failed.empty() && unknown.empty());
    if (const std::string flag = fp8audit::cli::FirstUnknownFlag(rest, flags);
        extras && !flag.empty()) {
      what = fp8audit::cli::UnknownFlagLine(flag, flags);
    }
    std::cerr << fp8audit::cli::UsageError(failed, unknown, what, commands);
    return fp8audit::cli::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "fp8audit: internal error: " << e.what() << "\n";
    return fp8audit::cli::kExitInternal;
  }
  return exit_code;
}
