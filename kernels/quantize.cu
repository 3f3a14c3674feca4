// Plain quantize (fenced amax, like cast-transpose) and dequantize kernels.
#include <algorithm>

#include "kernels/cuda_launch.h"
#include "kernels/device_common.cuh"

namespace fp8audit::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, Fp8Type F>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* __restrict__ input, int64_t n, const float* __restrict__ scale_ptr,
                    uint8_t* __restrict__ out, unsigned int* amax_bits, float* scale_inv,
                    bool vector_ok) {
  __shared__ unsigned int warp_scratch[kThreads / 32];
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = detail::device_reciprocal(scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t local = 0;
  uint32_t lo16 = 0;
  uint32_t hi16 = 0;
  int64_t scalar_begin = 0;
  if (vector_ok) {
    const int64_t nvec = n / kVec;
    for (int64_t i = first; i < nvec; i += stride) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(input) + i);
      if constexpr (sizeof(T) == 4) {
        local = max(local, v.x & 0x7FFFFFFFu);
        local = max(local, v.y & 0x7FFFFFFFu);
        local = max(local, v.z & 0x7FFFFFFFu);
        local = max(local, v.w & 0x7FFFFFFFu);
        const uint32_t a = detail::cvt_pair<F>(__fmul_rn(__uint_as_float(v.x), scale),
                                               __fmul_rn(__uint_as_float(v.y), scale));
        const uint32_t b = detail::cvt_pair<F>(__fmul_rn(__uint_as_float(v.z), scale),
                                               __fmul_rn(__uint_as_float(v.w), scale));
        reinterpret_cast<uint32_t*>(out)[i] = a | (b << 16);
      } else {
        const float2 f0 = detail::widen_pair<T>(v.x, lo16, hi16);
        const float2 f1 = detail::widen_pair<T>(v.y, lo16, hi16);
        const float2 f2 = detail::widen_pair<T>(v.z, lo16, hi16);
        const float2 f3 = detail::widen_pair<T>(v.w, lo16, hi16);
        const uint32_t p0 = detail::cvt_pair<F>(__fmul_rn(f0.x, scale), __fmul_rn(f0.y, scale));
        const uint32_t p1 = detail::cvt_pair<F>(__fmul_rn(f1.x, scale), __fmul_rn(f1.y, scale));
        const uint32_t p2 = detail::cvt_pair<F>(__fmul_rn(f2.x, scale), __fmul_rn(f2.y, scale));
        const uint32_t p3 = detail::cvt_pair<F>(__fmul_rn(f3.x, scale), __fmul_rn(f3.y, scale));
        reinterpret_cast<uint2*>(out)[i] = make_uint2(p0 | (p1 << 16), p2 | (p3 << 16));
      }
    }
    scalar_begin = nvec * kVec;
  }
  for (int64_t i = scalar_begin + first; i < n; i += stride) {
    uint32_t abs_bits;
    const float x = detail::load_scalar<T>(input + i, abs_bits);
    local = max(local, abs_bits);
    out[i] = static_cast<uint8_t>(detail::cvt_pair<F>(__fmul_rn(x, scale), 0.0f) & 0xFFu);
  }
  if constexpr (sizeof(T) == 2)
    local = max(local, detail::pair_maxima_to_float_bits<T>(lo16, hi16));
  detail::fence_then_publish_amax</*kFenced=*/true>(local, amax_bits, warp_scratch);
}

__global__ void dequantize_kernel(const uint8_t* __restrict__ input, int64_t n,
                                  const float* __restrict__ scale_inv_ptr, Fp8Type format,
                                  DType out_dtype, void* __restrict__ out) {
  const float scale_inv = *scale_inv_ptr;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = canonicalize_nan(__fmul_rn(decode_fp8(input[i], format), scale_inv));
    if (out_dtype == DType::kFloat32) {
      static_cast<float*>(out)[i] = v;
    } else if (out_dtype == DType::kBFloat16) {
      static_cast<uint16_t*>(out)[i] = float_to_bf16(v);
    } else {
      static_cast<uint16_t*>(out)[i] = float_to_half(v);
    }
  }
}

int grid_for(int64_t work_items) {
  int device = 0;
  int sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  const int64_t wanted = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 8)));
}

bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <typename T, Fp8Type F>
cudaError_t launch_quantize(const void* input, int64_t n, const float* scale, uint8_t* out,
                            float* amax, float* scale_inv, cudaStream_t stream) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vector_ok = aligned_to(input, 16) && aligned_to(out, kVec);
  quantize_kernel<T, F><<<grid_for(n / kVec + 1), kThreads, 0, stream>>>(
      static_cast<const T*>(input), n, scale, out, reinterpret_cast<unsigned int*>(amax), scale_inv,
      vector_ok);
  return cudaGetLastError();
}

template <typename T>
cudaError_t quantize_format(const void* input, int64_t n, const float* scale, Fp8Type format,
                            uint8_t* out, float* amax, float* scale_inv, cudaStream_t stream) {
  return format == Fp8Type::kE4M3
             ? launch_quantize<T, Fp8Type::kE4M3>(input, n, scale, out, amax, scale_inv, stream)
             : launch_quantize<T, Fp8Type::kE5M2>(input, n, scale, out, amax, scale_inv, stream);
}

}  // namespace

cudaError_t quantize(const void* input, DType dtype, int64_t n, const float* scale, Fp8Type format,
                     uint8_t* out, float* amax, float* scale_inv, cudaStream_t stream) {
  if (input == nullptr || scale == nullptr || out == nullptr || amax == nullptr ||
      scale_inv == nullptr || n <= 0) {
    return cudaErrorInvalidValue;
  }
  switch (dtype) {
    case DType::kFloat32:
      return quantize_format<float>(input, n, scale, format, out, amax, scale_inv, stream);
    case DType::kBFloat16:
      return quantize_format<__nv_bfloat16>(input, n, scale, format, out, amax, scale_inv, stream);
    case DType::kFloat16:
      return quantize_format<__half>(input, n, scale, format, out, amax, scale_inv, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t dequantize(const uint8_t* input, int64_t n, const float* scale_inv, Fp8Type format,
                       DType out_dtype, void* out, cudaStream_t stream) {
  if (input == nullptr || scale_inv == nullptr || out == nullptr || n <= 0) {
    return cudaErrorInvalidValue;
  }
  dequantize_kernel<<<grid_for(n), kThreads, 0, stream>>>(input, n, scale_inv, format, out_dtype,
                                                          out);
  return cudaGetLastError();
}

}  // namespace fp8audit::kernels::cuda
