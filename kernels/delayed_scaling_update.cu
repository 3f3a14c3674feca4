// DelayedScaling update for many tensors in one launch (see ref::delayed_scaling_update).
#include <cfloat>

#include "kernels/cuda_launch.h"
#include "kernels/device_common.cuh"

namespace fp8audit::kernels::cuda {
namespace {

constexpr int kThreads = 128;

__device__ float device_compute_scale(float amax, float previous, float max_value, int margin) {
  float s = previous;
  const uint32_t bits = __float_as_uint(amax);
  const bool finite = (bits & 0x7F800000u) != 0x7F800000u;
  if (finite && amax > 0.0f) {
    const float pow2 = __uint_as_float(static_cast<uint32_t>(margin + 127) << 23);
    s = __fdiv_rn(__fdiv_rn(max_value, amax), pow2);
  }
  if ((__float_as_uint(s) & 0x7FFFFFFFu) == 0x7F800000u) s = FLT_MAX;
  return s;
}

// One thread per tensor: its history column is read and rolled in place in one pass.
__global__ void __launch_bounds__(kThreads)
    delayed_scaling_update_kernel(float* __restrict__ history, int64_t history_len,
                                  int64_t num_tensors, float* __restrict__ scale,
                                  float* __restrict__ scale_inv, float max_value, int margin,
                                  AmaxAlgo algo) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tensors) return;
  float* column = history + t;
  const float first = column[0];
  float amax = first;
  bool saw_nan = bits_are_nan(__float_as_uint(first));
  for (int64_t h = 0; h + 1 < history_len; ++h) {
    const float v = column[(h + 1) * num_tensors];
    saw_nan = saw_nan || bits_are_nan(__float_as_uint(v));
    if (v > amax) amax = v;
    column[h * num_tensors] = v;
  }
  column[(history_len - 1) * num_tensors] = first;
  column[0] = 0.0f;
  if (algo == AmaxAlgo::kMostRecent) {
    amax = first;
  } else if (saw_nan) {
    amax = __uint_as_float(kCanonicalNanBits);
  }
  const float s = device_compute_scale(amax, scale[t], max_value, margin);
  scale[t] = s;
  scale_inv[t] = detail::device_reciprocal(s);
}

}  // namespace

cudaError_t delayed_scaling_update(float* amax_history, int64_t history_len, int64_t num_tensors,
                                   float* scale, float* scale_inv, Fp8Type format, int margin,
                                   AmaxAlgo algo, cudaStream_t stream) {
  if (amax_history == nullptr || scale == nullptr || scale_inv == nullptr || history_len <= 0 ||
      num_tensors <= 0 || margin < -126 || margin > 127) {
    return cudaErrorInvalidValue;
  }
  const int64_t blocks = (num_tensors + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFF) return cudaErrorInvalidValue;
  delayed_scaling_update_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(
      amax_history, history_len, num_tensors, scale, scale_inv, fp8_max(format), margin, algo);
  return cudaGetLastError();
}

}  // namespace fp8audit::kernels::cuda
