#include "cli/version.h"

#include "cli/build_info.h"  // generated at build time (cli/build_info.cmake)

// Facts of the configuration (cli/CMakeLists.txt); empty where built without them.
#ifndef FP8AUDIT_BUILT_CUDA
#define FP8AUDIT_BUILT_CUDA ""
#endif
#ifndef FP8AUDIT_BUILT_CUDA_KERNELS
#define FP8AUDIT_BUILT_CUDA_KERNELS 0
#endif
#ifndef FP8AUDIT_BUILT_CUPTI
#define FP8AUDIT_BUILT_CUPTI ""
#endif
#ifndef FP8AUDIT_BUILT_TORCH
#define FP8AUDIT_BUILT_TORCH ""
#endif

namespace fp8audit::cli {
namespace {

std::string OrNone(const std::string& value) { return value.empty() ? "none" : value; }

}  // namespace

std::string VersionText() {
  std::string commit = FP8AUDIT_GIT_COMMIT;
  if (commit == "unknown") commit += " (not built from a git checkout)";
  std::string cuda = OrNone(FP8AUDIT_BUILT_CUDA);
  if (cuda != "none") {
    cuda += FP8AUDIT_BUILT_CUDA_KERNELS ? " (toolkit; CUDA kernels built)"
                                        : " (toolkit; CUDA kernels not built)";
  }
  std::string cupti = OrNone(FP8AUDIT_BUILT_CUPTI);
  if (cupti != "none") cupti = "API version " + cupti + " (the agent's headers)";
  return std::string("fp8audit ") + FP8AUDIT_VERSION + "\ncommit: " + commit + "\ncuda: " + cuda +
         "\ncupti: " + cupti + "\npytorch: " + OrNone(FP8AUDIT_BUILT_TORCH);
}

}  // namespace fp8audit::cli
