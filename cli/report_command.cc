// Placeholder until `fp8audit report` lands: the subcommand exists and says it is not built yet.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace fp8audit::cli {

void AddReportCommand(CLI::App& app, int* exit_code) {
  auto* sub = app.add_subcommand("report", "(not available in this build)");
  sub->allow_extras();
  sub->callback([exit_code] {
    std::cerr << "fp8audit report: not available in this build\n";
    *exit_code = kExitInternal;
  });
}

}  // namespace fp8audit::cli
