#include "cli/usage_error.h"

#include <algorithm>

namespace fp8audit::cli {
namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      // A swap of two neighbours counts as one edit ("rpeort" is one from "report").
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], diagonal);
      }
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string NearestCommand(std::string_view typed, const std::vector<std::string>& commands) {
  std::string best;
  size_t best_distance = 3;
  for (const std::string& c : commands) {
    const size_t d = EditDistance(typed, c);
    if (d < best_distance && 2 * d < typed.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string FirstUnknownFlag(const std::vector<std::string>& args,
                             const std::vector<std::string>& known) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || a == "-") continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) == known.end()) return name;
  }
  return "";
}

std::string UnknownFlagLine(const std::string& flag, const std::vector<std::string>& known) {
  std::string line = "unknown flag '" + flag + "'";
  if (const std::string near = NearestCommand(flag, known); !near.empty()) {
    line += " (did you mean '" + near + "'?)";
  }
  return line;
}

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  std::string name = CLI::Formatter::make_option_name(opt, is_positional);
  for (size_t at = name.find('{'); at != std::string::npos; at = name.find('{', at)) {
    const size_t end = name.find('}', at);
    if (end == std::string::npos) break;
    name.erase(at, end - at + 1);
  }
  return name;
}

std::string UsageError(const std::string& command, const std::string& unknown,
                       const std::string& what, const std::vector<std::string>& commands) {
  std::string line = "fp8audit";
  if (!command.empty()) {
    line += " " + command + ": " + what;
  } else if (!unknown.empty()) {
    line += ": unknown command '" + unknown + "'";
    if (const std::string near = NearestCommand(unknown, commands); !near.empty()) {
      line += " (did you mean '" + near + "'?)";
    }
    line += "; the commands are " + Joined(commands);
  } else {
    line += ": " + what + "; the commands are " + Joined(commands);
  }
  for (char& c : line) {
    if (c == '\n') c = ' ';  // one line, whatever the parser wrote
  }
  return line + " (see 'fp8audit" + (command.empty() ? "" : " " + command) + " --help')\n";
}

}  // namespace fp8audit::cli
