// The fp8audit subcommands. Each Add*Command registers one CLI11 subcommand whose callback stores
// the process exit code in *exit_code (see exit_codes.h).
#pragma once

#include <CLI/CLI.hpp>

namespace fp8audit::cli {

void AddModelCommand(CLI::App& app, int* exit_code);
void AddRunCommand(CLI::App& app, int* exit_code);
void AddReportCommand(CLI::App& app, int* exit_code);
void AddCheckCommand(CLI::App& app, int* exit_code);
// Reads the other subcommands when it runs: add it last.
void AddCompletionCommand(CLI::App& app, int* exit_code);

}  // namespace fp8audit::cli
