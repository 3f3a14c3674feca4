// The two DelayedScaling update entry points of Transformer Engine 2.x as its core library declares
// them (transformer_engine/common/include/transformer_engine/recipe.h, inside extern "C"; the types
// from transformer_engine.h: NVTETensor is a pointer, NVTEDType an unscoped enum), plus what the
// stand-in library saw of the last call, for the stand-in extension to check.
#pragma once

#include <vector>

typedef void* NVTETensor;
enum NVTEDType { kNVTEFloat32 = 4, kNVTEFloat8E4M3 = 7, kNVTEFloat8E5M2 = 8 };
struct CUstream_st;
typedef CUstream_st* cudaStream_t;

extern "C" {
void nvte_delayed_scaling_recipe_amax_and_scale_update(
    const NVTETensor amax_history, const NVTETensor scale, NVTETensor updated_amax_history,
    NVTETensor updated_scale, const char* amax_compute_algo, NVTEDType fp8_dtype, float margin,
    cudaStream_t stream);
void nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction(
    const NVTETensor amax_reduction_buffer, std::vector<NVTETensor> amax_histories,
    std::vector<NVTETensor> scales, const char* amax_compute_algo, NVTEDType fp8_dtype,
    float margin, cudaStream_t stream);

struct FakeTeCall {
  int entry = -1;                             // 0 amax_and_scale_update, 1 after_reduction
  const void* first = nullptr;                // amax_reduction_buffer / amax_history
  std::vector<NVTETensor> histories, scales;  // after_reduction; else {scale, updated...}
  const char* algo = nullptr;
  int dtype = -1;
  float margin = -1;
  cudaStream_t stream = nullptr;
};
// The last call the stand-in library received, and how many it received.
const FakeTeCall* fake_te_last_call();
int fake_te_calls();
}
