#include "kernels/reference.h"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <vector>

namespace fp8audit::kernels::ref {
namespace {

// Element i of `input` widened to float (exact) together with its |x| bits for the amax.
struct Loaded {
  float value;
  uint32_t abs_bits;
};

Loaded load(const void* input, DType dtype, size_t i) {
  if (dtype == DType::kFloat32) {
    const float x = static_cast<const float*>(input)[i];
    return {x, abs_bits_of_float(x)};
  }
  const uint16_t h = static_cast<const uint16_t*>(input)[i];
  const float x = dtype == DType::kBFloat16 ? bf16_to_float(h) : half_to_float(h);
  return {x, abs16_to_float_bits(h & 0x7FFFu, dtype)};
}

void raise_amax(float* amax, uint32_t local_bits) {
  uint32_t current;
  std::memcpy(&current, amax, sizeof(current));
  const uint32_t result = std::max(current, local_bits);
  std::memcpy(amax, &result, sizeof(result));
}

}  // namespace

float reciprocal(float scale) { return canonicalize_nan(1.0f / scale); }

float pow2(int exponent) { return bits_to_float(static_cast<uint32_t>(exponent + 127) << 23); }

float compute_scale(float amax, float previous_scale, float fp8_max_value, int margin) {
  float s = previous_scale;
  const uint32_t amax_bits = float_to_bits(amax);
  const bool finite = (amax_bits & 0x7F800000u) != 0x7F800000u;
  if (finite && amax > 0.0f) s = (fp8_max_value / amax) / pow2(margin);
  if ((float_to_bits(s) & 0x7FFFFFFFu) == 0x7F800000u) s = FLT_MAX;
  return s;
}

void quantize(const void* input, DType dtype, size_t n, float scale, Fp8Type format, uint8_t* out,
              float* amax, float* scale_inv) {
  uint32_t local = 0;
  for (size_t i = 0; i < n; ++i) {
    const Loaded x = load(input, dtype, i);
    out[i] = encode_fp8(scaled_product(x.value, scale), format);
    local = std::max(local, x.abs_bits);
  }
  raise_amax(amax, local);
  *scale_inv = reciprocal(scale);
}

void cast_transpose(const void* input, DType dtype, int64_t rows, int64_t cols, float scale,
                    Fp8Type format, uint8_t* rowwise, uint8_t* columnwise, float* amax,
                    float* scale_inv) {
  constexpr int64_t kBlock = 64;  // cache blocking for the transposed writes
  uint32_t local = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t r1 = std::min(rows, r0 + kBlock);
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const Loaded x = load(input, dtype, static_cast<size_t>(r * cols + c));
          const uint8_t q = encode_fp8(scaled_product(x.value, scale), format);
          rowwise[r * cols + c] = q;
          columnwise[c * rows + r] = q;
          local = std::max(local, x.abs_bits);
        }
      }
    }
  }
  raise_amax(amax, local);
  *scale_inv = reciprocal(scale);
}

void dequantize(const uint8_t* input, size_t n, float scale_inv, Fp8Type format, DType out_dtype,
                void* out) {
  for (size_t i = 0; i < n; ++i) {
    const float v = canonicalize_nan(decode_fp8(input[i], format) * scale_inv);
    switch (out_dtype) {
      case DType::kFloat32:
        static_cast<float*>(out)[i] = v;
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(out)[i] = float_to_bf16(v);
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(out)[i] = float_to_half(v);
        break;
    }
  }
}

void delayed_scaling_update(float* amax_history, int64_t history_len, int64_t num_tensors,
                            float* scale, float* scale_inv, Fp8Type format, int margin,
                            AmaxAlgo algo) {
  const float max_value = fp8_max(format);
  for (int64_t t = 0; t < num_tensors; ++t) {
    float* column = amax_history + t;
    const int64_t stride = num_tensors;
    const float first = column[0];
    float amax = first;
    bool saw_nan = bits_are_nan(float_to_bits(first));
    // Roll: row h takes row h+1 while the maximum is taken over every row.
    for (int64_t h = 0; h + 1 < history_len; ++h) {
      const float v = column[(h + 1) * stride];
      saw_nan = saw_nan || bits_are_nan(float_to_bits(v));
      if (v > amax) amax = v;
      column[h * stride] = v;
    }
    column[(history_len - 1) * stride] = first;
    column[0] = 0.0f;
    if (algo == AmaxAlgo::kMostRecent) {
      amax = first;
    } else if (saw_nan) {
      amax = bits_to_float(kCanonicalNanBits);
    }
    const float s = compute_scale(amax, scale[t], max_value, margin);
    scale[t] = s;
    scale_inv[t] = reciprocal(s);
  }
}

}  // namespace fp8audit::kernels::ref
