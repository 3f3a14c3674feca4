// Test-only CUDA kernels: exhaustive comparisons of the hardware conversions with the bit-level
// reference, and a small deterministic FP8 GEMM that consumes the kernels' outputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels::testing {

// Up to kMaxSamples mismatches are recorded as (input bits, hardware result, reference result).
constexpr int kMaxSamples = 16;
struct MismatchReport {
  unsigned long long count;
  uint32_t samples[kMaxSamples][3];
};

// For every float bit pattern in [begin, end): the hardware pair conversion used by the kernels
// (both lanes) against encode_fp8. `report` is a device pointer, zeroed by the caller.
cudaError_t CompareEncodeWithHardware(Fp8Type format, uint64_t begin, uint64_t end,
                                      MismatchReport* report);
// Every FP8 code: hardware FP8 -> half -> float against decode_fp8 (NaN only checked as NaN).
cudaError_t CompareDecodeWithHardware(Fp8Type format, MismatchReport* report);
// Every non-NaN float: float_to_half / float_to_bf16 against __float2half_rn /
// __float2bfloat16_rn (which = 0 half, 1 bf16), and every non-NaN half: half_to_float.
cudaError_t CompareNarrowingWithHardware(int which, uint64_t begin, uint64_t end,
                                         MismatchReport* report);
cudaError_t CompareHalfWideningWithHardware(MismatchReport* report);

// c[i][j] = (sum_p decode(a[i][p]) * decode(b[j][p])) * (*a_scale_inv) * (*b_scale_inv), with
// a fixed summation order (bitwise reproducible). a: m x k, b: n x k, c: m x n, all row-major.
cudaError_t GemmFp8NT(const uint8_t* a, Fp8Type a_format, const float* a_scale_inv,
                      const uint8_t* b, Fp8Type b_format, const float* b_scale_inv, int m, int n,
                      int k, float* c, cudaStream_t stream);

}  // namespace fp8audit::kernels::testing
