#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gpu_test_kernels.h"
#include "kernels/device_common.cuh"

namespace fp8audit::kernels::testing {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 132 * 16;

__device__ void Record(MismatchReport* report, uint32_t input, uint32_t hw, uint32_t sw) {
  const unsigned long long slot = atomicAdd(&report->count, 1ull);
  if (slot < kMaxSamples) {
    report->samples[slot][0] = input;
    report->samples[slot][1] = hw;
    report->samples[slot][2] = sw;
  }
}

template <Fp8Type F>
__global__ void EncodeKernel(uint64_t begin, uint64_t end, MismatchReport* report) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = begin + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < end;
       i += stride) {
    const uint32_t lo_bits = static_cast<uint32_t>(i);
    const uint32_t hi_bits = lo_bits ^ 0x5A5A5A5Au;  // a permutation: both lanes see every float
    const uint32_t pair = detail::cvt_pair<F>(__uint_as_float(lo_bits), __uint_as_float(hi_bits));
    const uint32_t sw_lo = encode_fp8(__uint_as_float(lo_bits), F);
    const uint32_t sw_hi = encode_fp8(__uint_as_float(hi_bits), F);
    if ((pair & 0xFFu) != sw_lo) Record(report, lo_bits, pair & 0xFFu, sw_lo);
    if ((pair >> 8) != sw_hi) Record(report, hi_bits, pair >> 8, sw_hi);
  }
}

__global__ void DecodeKernel(Fp8Type format, MismatchReport* report) {
  const uint32_t b = threadIdx.x;
  const __nv_fp8_interpretation_t interp = format == Fp8Type::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), interp);
  const float hw = __half2float(__half(h));
  const float sw = decode_fp8(static_cast<uint8_t>(b), format);
  const bool both_nan = isnan(hw) && isnan(sw);
  if (!both_nan && __float_as_uint(hw) != __float_as_uint(sw)) {
    Record(report, b, __float_as_uint(hw), __float_as_uint(sw));
  }
}

__global__ void NarrowKernel(int which, uint64_t begin, uint64_t end, MismatchReport* report) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = begin + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < end;
       i += stride) {
    const uint32_t bits = static_cast<uint32_t>(i);
    if (bits_are_nan(bits)) continue;
    const float x = __uint_as_float(bits);
    uint32_t hw;
    uint32_t sw;
    if (which == 0) {
      hw = __half_as_ushort(__float2half_rn(x));
      sw = float_to_half(x);
    } else {
      hw = __bfloat16_as_ushort(__float2bfloat16_rn(x));
      sw = float_to_bf16(x);
    }
    if (hw != sw) Record(report, bits, hw, sw);
  }
}

__global__ void HalfWidenKernel(MismatchReport* report) {
  const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= 0x10000u) return;
  const float hw = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  const float sw = half_to_float(static_cast<uint16_t>(h));
  if (isnan(hw) && isnan(sw)) return;
  if (__float_as_uint(hw) != __float_as_uint(sw)) {
    Record(report, h, __float_as_uint(hw), __float_as_uint(sw));
  }
}

constexpr int kTile = 16;

__global__ void GemmKernel(const uint8_t* a, Fp8Type a_format, const float* a_scale_inv,
                           const uint8_t* b, Fp8Type b_format, const float* b_scale_inv, int m,
                           int n, int k, float* c) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;  // of a and c
  const int col = blockIdx.x * kTile + threadIdx.x;  // of c, row of b
  float acc = 0.0f;
  for (int p0 = 0; p0 < k; p0 += kTile) {
    const int p = p0 + threadIdx.x;
    as[threadIdx.y][threadIdx.x] =
        (row < m && p < k) ? decode_fp8(a[static_cast<int64_t>(row) * k + p], a_format) : 0.0f;
    const int brow = blockIdx.x * kTile + threadIdx.y;
    bs[threadIdx.y][threadIdx.x] =
        (brow < n && p < k) ? decode_fp8(b[static_cast<int64_t>(brow) * k + p], b_format) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile; ++q) acc = fmaf(as[threadIdx.y][q], bs[threadIdx.x][q], acc);
    __syncthreads();
  }
  if (row < m && col < n) {
    c[static_cast<int64_t>(row) * n + col] = __fmul_rn(__fmul_rn(acc, *a_scale_inv), *b_scale_inv);
  }
}

}  // namespace

cudaError_t CompareEncodeWithHardware(Fp8Type format, uint64_t begin, uint64_t end,
                                      MismatchReport* report) {
  if (format == Fp8Type::kE4M3) {
    EncodeKernel<Fp8Type::kE4M3><<<kBlocks, kThreads>>>(begin, end, report);
  } else {
    EncodeKernel<Fp8Type::kE5M2><<<kBlocks, kThreads>>>(begin, end, report);
  }
  return cudaGetLastError();
}

cudaError_t CompareDecodeWithHardware(Fp8Type format, MismatchReport* report) {
  DecodeKernel<<<1, 256>>>(format, report);
  return cudaGetLastError();
}

cudaError_t CompareNarrowingWithHardware(int which, uint64_t begin, uint64_t end,
                                         MismatchReport* report) {
  NarrowKernel<<<kBlocks, kThreads>>>(which, begin, end, report);
  return cudaGetLastError();
}

cudaError_t CompareHalfWideningWithHardware(MismatchReport* report) {
  HalfWidenKernel<<<256, 256>>>(report);
  return cudaGetLastError();
}

cudaError_t GemmFp8NT(const uint8_t* a, Fp8Type a_format, const float* a_scale_inv,
                      const uint8_t* b, Fp8Type b_format, const float* b_scale_inv, int m, int n,
                      int k, float* c, cudaStream_t stream) {
  const dim3 block(kTile, kTile);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  GemmKernel<<<grid, block, 0, stream>>>(a, a_format, a_scale_inv, b, b_format, b_scale_inv, m, n,
                                         k, c);
  return cudaGetLastError();
}

}  // namespace fp8audit::kernels::testing
