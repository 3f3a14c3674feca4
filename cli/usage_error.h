// What `fp8audit` prints when its command line cannot be parsed: the problem in one line, then one
// hint (`Run 'fp8audit CMD --help' for usage.`), never the whole help; a mistyped command gets the
// nearest real one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8audit::cli {

// The command of `commands` nearest to `typed` by edit distance (at most 2, and less than half
// of `typed`'s length), else "".
std::string NearestCommand(std::string_view typed, const std::vector<std::string>& commands);

// The two lines for a parse error. `command`: the subcommand that failed ("" for the top level);
// `unknown`: a first argument that is not a command (only with command ""); `what`: the parser's
// message.
std::string UsageError(const std::string& command, const std::string& unknown,
                       const std::string& what, const std::vector<std::string>& commands);

}  // namespace fp8audit::cli
