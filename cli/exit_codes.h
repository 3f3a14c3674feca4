// Documented process exit codes of the fp8audit command (README "Exit codes").
#pragma once

namespace fp8audit::cli {

inline constexpr int kExitOk = 0;         // success; the audit passed
inline constexpr int kExitInternal = 1;   // an unexpected internal error
inline constexpr int kExitUsage = 2;      // bad flags, unreadable or malformed input
inline constexpr int kExitViolation = 3;  // the audit found violations
// `fp8audit run` returns the command's own exit code when the command failed (non-zero), and
// 128+N when it was killed by signal N.

}  // namespace fp8audit::cli
