// What `fp8audit` prints when its command line cannot be parsed: one line, the problem and where
// the usage is (`(see 'fp8audit CMD --help')`), never the whole help; a mistyped command gets the
// nearest real one.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fp8audit::cli {

// The command of `commands` nearest to `typed` by edit distance (at most 2, and less than half
// of `typed`'s length), else "".
std::string NearestCommand(std::string_view typed, const std::vector<std::string>& commands);

// The first of `args` (up to a "--" that ends the flags) that looks like a flag ("-x", "--name",
// "--name=value") and is none of `known` ("--out", "-o"), else "".
std::string FirstUnknownFlag(const std::vector<std::string>& args,
                             const std::vector<std::string>& known);

// "unknown flag '--outt' (did you mean '--out'?)": `flag` and, where one is near, the nearest of
// `known`.
std::string UnknownFlagLine(const std::string& flag, const std::vector<std::string>& known);

// The line for a parse error. `command`: the subcommand that failed ("" for the top level);
// `unknown`: a first argument that is not a command (only with command ""); `what`: the parser's
// message.
std::string UsageError(const std::string& command, const std::string& unknown,
                       const std::string& what, const std::vector<std::string>& commands);

// Help as the parser writes it, less its own notation: a negated flag is listed as
// "--progress,--no-progress", not "--progress,--no-progress{false}".
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
};

}  // namespace fp8audit::cli
