// Device helpers shared by the FP8 kernels: element loads, the hardware FP8 conversion and the
// fenced amax publication. CUDA only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels::detail {

template <typename T>
struct InputTraits;
template <>
struct InputTraits<float> {
  static constexpr DType kDType = DType::kFloat32;
};
template <>
struct InputTraits<__nv_bfloat16> {
  static constexpr DType kDType = DType::kBFloat16;
};
template <>
struct InputTraits<__half> {
  static constexpr DType kDType = DType::kFloat16;
};

// Two floats -> two FP8 codes (lo in bits 0-7, hi in bits 8-15) with the hardware conversion,
// round to nearest even with saturation to the finite range (bit-identical to encode_fp8, which
// the GPU test checks for every float).
template <Fp8Type F>
__device__ __forceinline__ uint32_t cvt_pair(float lo, float hi) {
  constexpr __nv_fp8_interpretation_t kInterp = F == Fp8Type::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  return static_cast<uint32_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kInterp));
}

// Widen one 32-bit word holding two 16-bit elements (element 0 in the low half) to floats,
// and raise the running |x| maxima (kept in the element's own 16-bit magnitude order).
template <typename T>
__device__ __forceinline__ float2 widen_pair(uint32_t w, uint32_t& max_lo, uint32_t& max_hi);

template <>
__device__ __forceinline__ float2 widen_pair<__nv_bfloat16>(uint32_t w, uint32_t& max_lo,
                                                            uint32_t& max_hi) {
  max_lo = max(max_lo, w & 0x7FFFu);
  max_hi = max(max_hi, w & 0x7FFF0000u);
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}

template <>
__device__ __forceinline__ float2 widen_pair<__half>(uint32_t w, uint32_t& max_lo,
                                                     uint32_t& max_hi) {
  max_lo = max(max_lo, w & 0x7FFFu);
  max_hi = max(max_hi, w & 0x7FFF0000u);
  __half2 h;
  static_assert(sizeof(h) == sizeof(w));
  memcpy(&h, &w, sizeof(w));
  return __half22float2(h);
}

// One element (scalar paths): its float value and its |x| as float bits.
template <typename T>
__device__ __forceinline__ float load_scalar(const T* p, uint32_t& abs_float_bits);

template <>
__device__ __forceinline__ float load_scalar<float>(const float* p, uint32_t& abs_float_bits) {
  const float x = *p;
  abs_float_bits = __float_as_uint(x) & 0x7FFFFFFFu;
  return x;
}

template <>
__device__ __forceinline__ float load_scalar<__nv_bfloat16>(const __nv_bfloat16* p,
                                                            uint32_t& abs_float_bits) {
  const uint16_t h = *reinterpret_cast<const uint16_t*>(p);
  abs_float_bits = static_cast<uint32_t>(h & 0x7FFFu) << 16;
  return bf16_to_float(h);
}

template <>
__device__ __forceinline__ float load_scalar<__half>(const __half* p, uint32_t& abs_float_bits) {
  const uint16_t h = *reinterpret_cast<const uint16_t*>(p);
  abs_float_bits = abs16_to_float_bits(h & 0x7FFFu, DType::kFloat16);
  return __half2float(*p);
}

// Float bits of the larger 16-bit magnitude kept by widen_pair's two maxima.
template <typename T>
__device__ __forceinline__ uint32_t pair_maxima_to_float_bits(uint32_t max_lo, uint32_t max_hi) {
  return abs16_to_float_bits(max(max_lo, max_hi >> 16), InputTraits<T>::kDType);
}

constexpr int kMaxWarpsPerBlock = 32;

// The last step of every kernel that produces an amax. Every thread of the block must call it
// after its last output store. With kFenced (the only instantiation the library builds), each
// thread's stores are ordered at device scope before the block's single atomic publishes the
// amax; the unfenced form exists only so the benchmark can measure the fence's cost.
template <bool kFenced>
__device__ __forceinline__ void fence_then_publish_amax(uint32_t local_abs_bits,
                                                        unsigned int* amax_bits,
                                                        unsigned int* warp_scratch) {
  if constexpr (kFenced) {
    __threadfence();
  }
#if __CUDA_ARCH__ >= 800
  const unsigned int warp_max = __reduce_max_sync(0xFFFFFFFFu, local_abs_bits);
#else
  unsigned int warp_max = local_abs_bits;
  for (int offset = 16; offset > 0; offset >>= 1) {
    warp_max = max(warp_max, __shfl_xor_sync(0xFFFFFFFFu, warp_max, offset));
  }
#endif
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_scratch[warp] = warp_max;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int m = 0;
    const int warps = (blockDim.x + 31) >> 5;
    for (int w = 0; w < warps; ++w) m = max(m, warp_scratch[w]);
    atomicMax(amax_bits, m);
  }
}

// scale_inv = 1/scale, correctly rounded, NaN canonical (same as ref::reciprocal).
__device__ __forceinline__ float device_reciprocal(float scale) {
  return canonicalize_nan(__frcp_rn(scale));
}

}  // namespace fp8audit::kernels::detail
