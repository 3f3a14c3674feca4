// A stand-in for libtransformer_engine.so: the update entry points with TE's exact signatures (the
// vectors by value), recording what they receive. amax_compute_algo "throw" makes them throw, as
// TE's checks do.
#include <stdexcept>
#include <string>

#include "tests/agent/fake_te/fake_te_api.h"

namespace {
FakeTeCall g_last;
int g_calls = 0;

void MaybeThrow(const char* algo) {
  if (algo != nullptr && std::string(algo) == "throw") {
    throw std::runtime_error("the stand-in TE refuses this call");
  }
}
}  // namespace

extern "C" {

void nvte_delayed_scaling_recipe_amax_and_scale_update(
    const NVTETensor amax_history, const NVTETensor scale, NVTETensor updated_amax_history,
    NVTETensor updated_scale, const char* amax_compute_algo, NVTEDType fp8_dtype, float margin,
    cudaStream_t stream) {
  MaybeThrow(amax_compute_algo);
  g_last = FakeTeCall{0,
                      amax_history,
                      {updated_amax_history},
                      {scale, updated_scale},
                      amax_compute_algo,
                      fp8_dtype,
                      margin,
                      stream};
  ++g_calls;
}

void nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction(
    const NVTETensor amax_reduction_buffer, std::vector<NVTETensor> amax_histories,
    std::vector<NVTETensor> scales, const char* amax_compute_algo, NVTEDType fp8_dtype,
    float margin, cudaStream_t stream) {
  MaybeThrow(amax_compute_algo);
  g_last = FakeTeCall{
      1,     amax_reduction_buffer, amax_histories, scales, amax_compute_algo, fp8_dtype, margin,
      stream};
  ++g_calls;
}

const FakeTeCall* fake_te_last_call() { return &g_last; }
int fake_te_calls() { return g_calls; }

}  // extern "C"
