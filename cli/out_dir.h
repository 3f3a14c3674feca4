// Whose folder the traces go to (`fp8audit run --out`): no other user may replace or plant a
// trace there, or the verdict would be theirs (issue 34 item 1).
#pragma once

#include <string>
#include <vector>

namespace fp8audit::cli {

// Why `dir` (an existing directory) must not receive this run's traces, "" when it may: it is owned
// by another user, or others can write into it without the sticky bit (which keeps them from
// renaming or removing files they do not own).
std::string UnsafeOutDir(const std::string& dir);

// The traces in `paths` this user owns, in order; the others (planted by another user) go to
// `foreign`.
std::vector<std::string> OwnTraces(const std::vector<std::string>& paths,
                                   std::vector<std::string>* foreign);

}  // namespace fp8audit::cli
