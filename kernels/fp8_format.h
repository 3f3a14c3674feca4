// FP8 E4M3 / E5M2 encode and decode, and the 16-bit float conversions the kernels need, written
// on bit patterns only so that the CPU reference (plain C++) and the CUDA kernels compute the
// same bits. Compiles with g++ (no CUDA) and with nvcc as __host__ __device__ code.
//
// Encoding semantics (identical to the hardware cvt.rn.satfinite.{e4m3,e5m2}x2.f32):
//   * round to nearest, ties to even, including into the FP8 subnormal range;
//   * finite values whose magnitude rounds past the format's max, and +-Inf, saturate to +-max;
//   * any NaN (either sign, any payload) encodes as 0x7F;
//   * the sign of zero is kept (-0.0f -> 0x80; negative values that underflow -> 0x80).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp8audit/vocabulary.h"

#if defined(__CUDACC__)
#define FP8AUDIT_HD __host__ __device__ __forceinline__
#else
#define FP8AUDIT_HD inline
#endif

namespace fp8audit::kernels {

// The FP8 element types: fp8audit::Fp8Type (fp8audit/vocabulary.h).
// High-precision element types the kernels read (quantize) or write (dequantize).
enum class DType : uint8_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
// How the DelayedScaling update reduces the amax history.
enum class AmaxAlgo : uint8_t { kMax = 0, kMostRecent = 1 };

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
// The one NaN the kernels write in float32 results (what the GPU's arithmetic produces).
inline constexpr uint32_t kCanonicalNanBits = 0x7FFFFFFFu;
inline constexpr uint8_t kFp8NanCode = 0x7F;
inline constexpr uint16_t kHalfNanBits = 0x7FFF;
inline constexpr uint16_t kBf16NanBits = 0x7FFF;

FP8AUDIT_HD constexpr float fp8_max(Fp8Type f) { return f == Fp8Type::kE4M3 ? kE4M3Max : kE5M2Max; }

FP8AUDIT_HD constexpr int dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

FP8AUDIT_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

FP8AUDIT_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

FP8AUDIT_HD bool bits_are_nan(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// NaN results are replaced by kCanonicalNanBits; everything else passes through unchanged.
FP8AUDIT_HD float canonicalize_nan(float f) {
  return bits_are_nan(float_to_bits(f)) ? bits_to_float(kCanonicalNanBits) : f;
}

// v >> s rounded to nearest, ties to even; s in [1, 31].
FP8AUDIT_HD uint32_t shift_right_rne(uint32_t v, uint32_t s) {
  const uint32_t q = v >> s;
  const uint32_t rem = v & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1u);
  return q + ((rem > half || (rem == half && (q & 1u) != 0u)) ? 1u : 0u);
}

// Generic IEEE-style binary32 -> small float narrowing with round-to-nearest-even.
// mant_bits/bias describe the target; `a` is |x| as bits, finite and below the overflow bound.
FP8AUDIT_HD uint32_t narrow_magnitude_rne(uint32_t a, uint32_t mant_bits, uint32_t bias) {
  const uint32_t e = a >> 23;
  const uint32_t min_normal_e = 127u - bias + 1u;  // float exponent of the target's min normal
  if (e >= min_normal_e) {
    // Re-bias the exponent, keep all 23 mantissa bits, then round away the extra ones: a carry
    // out of the mantissa correctly bumps the exponent.
    const uint32_t v = ((e - 127u + bias) << 23) | (a & 0x7FFFFFu);
    return shift_right_rne(v, 23u - mant_bits);
  }
  // Target subnormal (or zero): count units of the target's smallest subnormal,
  // 2^(1 - bias - mant_bits). The float's value is sig * 2^(e - 150).
  const uint32_t s = 151u - bias - mant_bits - e;
  if (s > 25u) return 0u;  // below half the smallest subnormal (also float zero/subnormals)
  const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  return shift_right_rne(sig, s);
}

FP8AUDIT_HD uint8_t encode_fp8(float x, Fp8Type f) {
  const uint32_t u = float_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFp8NanCode;
  const bool e4m3 = f == Fp8Type::kE4M3;
  // Every magnitude >= max rounds to max (ties at the top round to the even max) or saturates.
  const uint32_t max_bits = e4m3 ? 0x43E00000u /*448*/ : 0x47600000u /*57344*/;
  const uint32_t max_code = e4m3 ? 0x7Eu : 0x7Bu;
  if (a >= max_bits) return static_cast<uint8_t>(sign | max_code);
  const uint32_t mag = e4m3 ? narrow_magnitude_rne(a, 3u, 7u) : narrow_magnitude_rne(a, 2u, 15u);
  return static_cast<uint8_t>(sign | mag);
}

// Exact FP8 -> float. NaN codes decode to kCanonicalNanBits; E5M2 infinities to +-Inf.
FP8AUDIT_HD float decode_fp8(uint8_t b, Fp8Type f) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t mag = b & 0x7Fu;
  const bool e4m3 = f == Fp8Type::kE4M3;
  const uint32_t mant_bits = e4m3 ? 3u : 2u;
  const uint32_t bias = e4m3 ? 7u : 15u;
  if (e4m3 ? mag == 0x7Fu : mag > 0x7Cu) return bits_to_float(kCanonicalNanBits);
  if (!e4m3 && mag == 0x7Cu) return bits_to_float(sign | 0x7F800000u);
  const uint32_t e = mag >> mant_bits;
  const uint32_t m = mag & ((1u << mant_bits) - 1u);
  if (e != 0u) {
    return bits_to_float(sign | ((e - bias + 127u) << 23) | (m << (23u - mant_bits)));
  }
  if (m == 0u) return bits_to_float(sign);
  // Subnormal: normalise m (at most 3 bits) into an implicit-one float.
  uint32_t shift = 0;
  uint32_t mm = m;
  while ((mm & (1u << mant_bits)) == 0u) {
    mm <<= 1;
    ++shift;
  }
  const uint32_t exp = 127u + 1u - bias - shift;
  return bits_to_float(sign | (exp << 23) | ((mm & ((1u << mant_bits) - 1u)) << (23u - mant_bits)));
}

FP8AUDIT_HD float bf16_to_float(uint16_t h) {
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

// Exact; NaN payloads are kept (shifted), as IEEE widening does.
FP8AUDIT_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (m << 13));
  if (e != 0u) return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0u) return bits_to_float(sign);
  uint32_t exp = 113u;  // float exponent of 2^-14 (half's min normal)
  while ((m & 0x400u) == 0u) {
    m <<= 1;
    --exp;
  }
  return bits_to_float(sign | (exp << 23) | ((m & 0x3FFu) << 13));
}

// Round to nearest even; overflow goes to +-Inf; NaN -> kBf16NanBits.
FP8AUDIT_HD uint16_t float_to_bf16(float x) {
  const uint32_t u = float_to_bits(x);
  if (bits_are_nan(u)) return kBf16NanBits;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Round to nearest even; overflow goes to +-Inf; NaN -> kHalfNanBits.
FP8AUDIT_HD uint16_t float_to_half(float x) {
  const uint32_t u = float_to_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kHalfNanBits;
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to Inf
  return static_cast<uint16_t>(sign | narrow_magnitude_rne(a, 10u, 15u));
}

// |x| as float bits, for the amax: comparing these as unsigned integers orders every
// non-negative float, +Inf above the finite ones and NaNs above +Inf.
FP8AUDIT_HD uint32_t abs_bits_of_float(float x) { return float_to_bits(x) & 0x7FFFFFFFu; }

// Float bits of |h| for a 16-bit element whose magnitude bits are `abs16` (sign already cleared).
FP8AUDIT_HD uint32_t abs16_to_float_bits(uint32_t abs16, DType t) {
  return t == DType::kBFloat16 ? (abs16 << 16)
                               : float_to_bits(half_to_float(static_cast<uint16_t>(abs16)));
}

}  // namespace fp8audit::kernels
