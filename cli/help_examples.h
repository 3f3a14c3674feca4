// The "Examples:" section that ends `fp8audit --help` and every subcommand's --help: one or two
// command lines a user can paste. tests/cli/help_cli_test.cc runs each section's first line.
#pragma once

#include <initializer_list>
#include <string>

namespace fp8audit::cli {

// `footer` (may be empty), then "Examples:" and one indented line per example (a command, and
// after "#" what it does).
inline std::string WithExamples(const std::string& footer,
                                std::initializer_list<const char*> examples) {
  std::string text = footer;
  if (!text.empty()) text += text.back() == '\n' ? "\n" : "\n\n";
  text += "Examples:\n";
  for (const char* line : examples) text += std::string("  ") + line + "\n";
  return text;
}

}  // namespace fp8audit::cli
