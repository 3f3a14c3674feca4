#include "cli/python_hook.h"

#include <cstdlib>
#include <filesystem>

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool HasHook(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "fp8audit" / "hook" / "site" / "sitecustomize.py", ec);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> PythonHookEnvironment(
    const std::vector<std::string>& features, bool need_model, std::string* error) {
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::vector<fs::path> candidates;
  if (!Env("FP8AUDIT_PYTHON_DIR").empty()) {
    candidates.emplace_back(Env("FP8AUDIT_PYTHON_DIR"));  // when set, the only place looked in
  } else {
    candidates.push_back(exe_dir / ".." / "lib" / "python");
    // A wheel: <site-packages>/fp8audit/bin/fp8audit. Only the hook's site directory goes on
    // PYTHONPATH then (site-packages itself would reach interpreters of other environments); its
    // sitecustomize finds the package beside it.
    candidates.push_back(exe_dir / ".." / "..");
#ifdef FP8AUDIT_PYTHON_SOURCE_DIR
    candidates.emplace_back(FP8AUDIT_PYTHON_SOURCE_DIR);
#endif
  }
  fs::path python;
  bool wheel = false;
  for (const fs::path& c : candidates) {
    if (HasHook(c)) {
      python = fs::weakly_canonical(c, ec);
      wheel = Env("FP8AUDIT_PYTHON_DIR").empty() && c == candidates[1];
      break;
    }
  }
  if (python.empty()) {
    *error =
        "fp8audit's Python package not found (looked in " + candidates.front().string() +
        (candidates.size() > 1 ? " and " + std::to_string(candidates.size() - 1) + " more" : "") +
        "; set FP8AUDIT_PYTHON_DIR to the directory holding fp8audit/)";
    return {};
  }
  std::string model = Env("FP8AUDIT_MODEL_LIB");
  if (!model.empty() && !fs::is_regular_file(model, ec)) {
    if (need_model) {
      *error = "FP8AUDIT_MODEL_LIB=" + model + " is not a file";
      return {};
    }
    model.clear();
  } else if (model.empty()) {
    const fs::path lib = exe_dir / ".." / "lib" / "libfp8audit_model.so";
    if (fs::is_regular_file(lib, ec)) {
      model = fs::weakly_canonical(lib, ec).string();
    } else if (need_model) {
      *error = "libfp8audit_model.so not found at " + lib.string() +
               " (build the fp8audit_model target, or set FP8AUDIT_MODEL_LIB)";
      return {};
    }
  }
  const std::string site = (python / "fp8audit" / "hook" / "site").string();
  std::string path = wheel ? site : site + ":" + python.string();
  if (!Env("PYTHONPATH").empty()) path += ":" + Env("PYTHONPATH");
  std::string armed = Env("FP8AUDIT_PYHOOK");
  for (const std::string& f : features) {
    if (("," + armed + ",").find("," + f + ",") != std::string::npos) continue;
    armed += (armed.empty() ? "" : ",") + f;
  }
  std::vector<std::pair<std::string, std::string>> env = {{"PYTHONPATH", path},
                                                          {"FP8AUDIT_PYHOOK", armed}};
  if (!model.empty()) env.emplace_back("FP8AUDIT_MODEL_LIB", model);
  return env;
}

}  // namespace fp8audit::cli
