// The environment that installs fp8audit's Python hook (python/fp8audit/hook) into a command and
// every Python process it starts: the hook's sitecustomize first on PYTHONPATH, fp8audit's Python
// package after it, the features to arm (FP8AUDIT_PYHOOK) and the model library the features use
// (FP8AUDIT_MODEL_LIB). Used by `fp8audit run` (te-version, te-recompute and te-count by default,
// te-fix with --fix-te).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fp8audit::cli {

// Variables to set for CMD, or an empty list and one line in `error` when fp8audit's Python
// package or (`need_model`: the features use it) libfp8audit_model.so cannot be found. Looked up:
// FP8AUDIT_PYTHON_DIR, else ../lib/python next to this executable (installed), else ../.. (a
// wheel: fp8audit/bin/fp8audit in site-packages; only the hook's directory goes on PYTHONPATH),
// else the source tree's python/ (build tree); the library: FP8AUDIT_MODEL_LIB, else
// ../lib/libfp8audit_model.so next to this executable (without `need_model`, set only when found).
std::vector<std::pair<std::string, std::string>> PythonHookEnvironment(
    const std::vector<std::string>& features, bool need_model, std::string* error);

}  // namespace fp8audit::cli
