// The CUDA backend of a build without the CUDA language: every entry point says so.
#include <stdexcept>

#include "runtime/backend.h"

namespace fp8audit::runtime::backend {
namespace {
[[noreturn]] void NotBuilt() {
  throw std::runtime_error(
      "fp8audit runtime: CUDA backend not built (this build has no CUDA compiler); use CPU "
      "tensors or rebuild with CUDA");
}
}  // namespace

bool cuda_built() { return false; }

namespace cuda {
void CastTranspose(const at::Tensor&, const float*, Fp8Type, float*, float*, at::Tensor*,
                   at::Tensor*) {
  NotBuilt();
}
at::Tensor GemmTN(const Fp8Operand&, const Fp8Operand&, at::ScalarType, const at::Tensor&, bool) {
  NotBuilt();
}
void DelayedScalingUpdate(const at::Tensor&, const at::Tensor&, const at::Tensor&, Fp8Type, int,
                          kernels::AmaxAlgo) {
  NotBuilt();
}
}  // namespace cuda

}  // namespace fp8audit::runtime::backend
