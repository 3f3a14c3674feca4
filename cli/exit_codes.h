// Documented process exit codes of the fp8audit command (docs/reference.md, "Exit codes").
#pragma once

namespace fp8audit::cli {

inline constexpr int kExitOk = 0;         // success; the audit passed
inline constexpr int kExitInternal = 1;   // an unexpected internal error
inline constexpr int kExitUsage = 2;      // bad flags, unreadable or malformed input
inline constexpr int kExitViolation = 3;  // the audit found violations
// `fp8audit run`: the command failed (non-zero, or killed by a signal), whatever the audit says;
// with --pass-exit-code, the command's own code instead (128+N when killed by signal N). 126 and
// 127: the command could not be executed, or was not found.
inline constexpr int kExitCommandFailed = 4;

}  // namespace fp8audit::cli
