// Placeholder until `fp8audit check` lands: the subcommand exists and says it is not built yet.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace fp8audit::cli {

void AddCheckCommand(CLI::App& app, int* exit_code) {
  auto* sub = app.add_subcommand("check", "(not available in this build)");
  sub->allow_extras();
  sub->callback([exit_code] {
    std::cerr << "fp8audit check: not available in this build\n";
    *exit_code = kExitInternal;
  });
}

}  // namespace fp8audit::cli
