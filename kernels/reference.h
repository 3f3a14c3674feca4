// CPU references for the FP8 kernels, bit-exact with the CUDA kernels. Plain C++ (no CUDA, no
// torch): CI tests these, and the torch API runs them for CPU tensors.
//
// Conventions shared with the kernels:
//   * q = encode_fp8(x * scale) with the product in float32 (round to nearest even);
//   * scale_inv = 1.0f / scale, a NaN result written as kCanonicalNanBits;
//   * amax is raised, never lowered: amax = max(amax, max |x|), both compared as float bit
//     patterns of non-negative values, so a NaN input makes amax NaN (the largest payload wins)
//     and +-Inf makes it +Inf. Start it at 0 for the amax of one tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels::ref {

// input: n elements of `dtype` (float, or bf16/fp16 as uint16 bit patterns). out: n bytes.
void quantize(const void* input, DType dtype, size_t n, float scale, Fp8Type format, uint8_t* out,
              float* amax, float* scale_inv);

// input viewed as rows x cols, row-major. rowwise: rows x cols; columnwise: cols x rows
// (the transpose), both FP8 bytes holding the same codes.
void cast_transpose(const void* input, DType dtype, int64_t rows, int64_t cols, float scale,
                    Fp8Type format, uint8_t* rowwise, uint8_t* columnwise, float* amax,
                    float* scale_inv);

// out[i] = decode(in[i]) * scale_inv in float32 (NaN -> kCanonicalNanBits), then narrowed to
// out_dtype with round to nearest even (see fp8_format.h).
void dequantize(const uint8_t* input, size_t n, float scale_inv, Fp8Type format, DType out_dtype,
                void* out);

// The value the FP8 byte holds after one quantization step, exposed for tests.
inline float scaled_product(float x, float scale) { return x * scale; }

// DelayedScaling update for num_tensors tensors at once. amax_history is [history_len,
// num_tensors] row-major; row 0 is the slot the current step's amax was accumulated into.
// For each tensor t:
//   amax     = max over the history column (NaN if any entry is NaN)   [AmaxAlgo::kMax]
//            | history[0][t]                                            [kMostRecent]
//   history  = rolled up by one (row i takes row i+1, the last row takes the old row 0), then
//              row 0 = +0 (ready for the next step);
//   scale    = fp8_max / amax / 2^margin            if amax > 0 and amax is finite,
//            | the previous scale                   otherwise;
//              an infinite result becomes FLT_MAX;
//   scale_inv = 1 / scale (NaN -> kCanonicalNanBits).
// margin must lie in [-126, 127].
void delayed_scaling_update(float* amax_history, int64_t history_len, int64_t num_tensors,
                            float* scale, float* scale_inv, Fp8Type format, int margin,
                            AmaxAlgo algo);

// Pieces shared by the reference and the kernels' host-side checks.
float reciprocal(float scale);  // 1/scale, NaN canonical
float pow2(int exponent);       // exact 2^exponent, exponent in [-126, 127]
float compute_scale(float amax, float previous_scale, float fp8_max_value, int margin);

}  // namespace fp8audit::kernels::ref
