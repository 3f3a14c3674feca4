// FP8 / fp16 / bf16 encoding edge cases, checked against the formats' definitions and against
// brute-force nearest-value oracles.
#include "kernels/fp8_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace fp8audit::kernels {
namespace {

constexpr Fp8Type kFormats[] = {Fp8Type::kE4M3, Fp8Type::kE5M2};

const char* Name(Fp8Type f) { return Fp8TypeName(f).data(); }

bool IsNanCode(uint8_t b, Fp8Type f) {
  const int mag = b & 0x7F;
  return f == Fp8Type::kE4M3 ? mag == 0x7F : mag > 0x7C;
}

bool IsInfCode(uint8_t b, Fp8Type f) { return f == Fp8Type::kE5M2 && (b & 0x7F) == 0x7C; }

// The value a code stands for, from the format's definition (double precision).
double Definition(uint8_t b, Fp8Type f) {
  const int mant_bits = f == Fp8Type::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Type::kE4M3 ? 7 : 15;
  const int e = (b & 0x7F) >> mant_bits;
  const int m = b & ((1 << mant_bits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - mant_bits);
  return sign * std::ldexp((1 << mant_bits) + m, e - bias - mant_bits);
}

// Oracle: the code nearest to x among the finite codes of x's sign (ties to the even code), from
// the definition's values (positive codes 0x00.. are increasing in value), with saturation for
// |x| >= max and NaN -> 0x7F. The sign of zero follows x.
uint8_t NearestCode(float x, Fp8Type f) {
  if (std::isnan(x)) return 0x7F;
  const int max_code = f == Fp8Type::kE4M3 ? 0x7E : 0x7B;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= fp8_max(f)) return static_cast<uint8_t>(sign | max_code);
  static const auto table = [](Fp8Type g) {
    std::vector<double> v((g == Fp8Type::kE4M3 ? 0x7E : 0x7B) + 1);
    for (size_t b = 0; b < v.size(); ++b) v[b] = Definition(static_cast<uint8_t>(b), g);
    return v;
  };
  static const std::vector<double> e4m3 = table(Fp8Type::kE4M3);
  static const std::vector<double> e5m2 = table(Fp8Type::kE5M2);
  const std::vector<double>& values = f == Fp8Type::kE4M3 ? e4m3 : e5m2;
  const int hi =
      static_cast<int>(std::upper_bound(values.begin(), values.end(), a) - values.begin());
  const int lo = hi - 1;  // values[lo] <= a < values[hi]
  const double dlo = a - values[lo];
  const double dhi = values[hi] - a;
  const int best = (dlo < dhi || (dlo == dhi && (lo & 1) == 0)) ? lo : hi;
  return static_cast<uint8_t>(sign | best);
}

float FromBits(uint32_t u) { return bits_to_float(u); }

TEST(Fp8Reference, DecodeMatchesFormatDefinitionForEveryCode) {
  for (Fp8Type f : kFormats) {
    for (int b = 0; b < 256; ++b) {
      const auto code = static_cast<uint8_t>(b);
      const float v = decode_fp8(code, f);
      if (IsNanCode(code, f)) {
        EXPECT_EQ(float_to_bits(v), kCanonicalNanBits) << Name(f) << " code " << b;
      } else if (IsInfCode(code, f)) {
        EXPECT_TRUE(std::isinf(v) && std::signbit(v) == ((b & 0x80) != 0)) << Name(f) << " " << b;
      } else {
        EXPECT_EQ(static_cast<double>(v), Definition(code, f)) << Name(f) << " code " << b;
        EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << Name(f) << " code " << b;
      }
    }
  }
}

TEST(Fp8Reference, E4M3RoundTripsEveryFiniteValue) {
  int checked = 0;
  for (int b = 0; b < 256; ++b) {
    const auto code = static_cast<uint8_t>(b);
    if (IsNanCode(code, Fp8Type::kE4M3)) continue;
    EXPECT_EQ(encode_fp8(decode_fp8(code, Fp8Type::kE4M3), Fp8Type::kE4M3), code) << b;
    ++checked;
  }
  EXPECT_EQ(checked, 254);
}

TEST(Fp8Reference, E5M2RoundTripsEveryFiniteValue) {
  int checked = 0;
  for (int b = 0; b < 256; ++b) {
    const auto code = static_cast<uint8_t>(b);
    if (IsNanCode(code, Fp8Type::kE5M2) || IsInfCode(code, Fp8Type::kE5M2)) continue;
    EXPECT_EQ(encode_fp8(decode_fp8(code, Fp8Type::kE5M2), Fp8Type::kE5M2), code) << b;
    ++checked;
  }
  EXPECT_EQ(checked, 248);
}

TEST(Fp8Reference, E5M2InfinityCodesDecodeToInfinityAndSaturateOnTheWayBack) {
  EXPECT_EQ(encode_fp8(decode_fp8(0x7C, Fp8Type::kE5M2), Fp8Type::kE5M2), 0x7B);
  EXPECT_EQ(encode_fp8(decode_fp8(0xFC, Fp8Type::kE5M2), Fp8Type::kE5M2), 0xFB);
}

TEST(Fp8Reference, TiesRoundToEven) {
  for (Fp8Type f : kFormats) {
    for (int sign = 0; sign < 2; ++sign) {
      for (int b = 0; b < 0x7F; ++b) {
        const auto lo = static_cast<uint8_t>(b | (sign << 7));
        const auto hi = static_cast<uint8_t>((b + 1) | (sign << 7));
        if (IsNanCode(hi, f) || IsInfCode(hi, f)) break;
        const float a = decode_fp8(lo, f);
        const float c = decode_fp8(hi, f);
        const float mid = (a + c) / 2.0f;  // exact: few significant bits
        ASSERT_EQ(static_cast<double>(mid), (Definition(lo, f) + Definition(hi, f)) / 2.0);
        const uint8_t even = (lo & 1) == 0 ? lo : hi;
        EXPECT_EQ(encode_fp8(mid, f), even) << Name(f) << " between " << b << " and " << b + 1;
        const float toward_lo = std::nextafter(mid, a);
        const float toward_hi = std::nextafter(mid, c);
        EXPECT_EQ(encode_fp8(toward_lo, f), lo) << Name(f) << " just off the tie " << b;
        EXPECT_EQ(encode_fp8(toward_hi, f), hi) << Name(f) << " just off the tie " << b;
      }
    }
  }
}

TEST(Fp8Reference, SignedZerosAreKept) {
  for (Fp8Type f : kFormats) {
    EXPECT_EQ(encode_fp8(0.0f, f), 0x00);
    EXPECT_EQ(encode_fp8(-0.0f, f), 0x80);
    EXPECT_EQ(encode_fp8(-1e-30f, f), 0x80);  // underflow keeps the sign
    EXPECT_EQ(encode_fp8(1e-30f, f), 0x00);
    EXPECT_EQ(float_to_bits(decode_fp8(0x80, f)), 0x80000000u);
    EXPECT_EQ(float_to_bits(decode_fp8(0x00, f)), 0x00000000u);
  }
}

TEST(Fp8Reference, EveryNaNEncodesAs0x7F) {
  const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                           0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA5A5A5u, 0xFF812345u};
  for (Fp8Type f : kFormats) {
    for (uint32_t n : nans) EXPECT_EQ(encode_fp8(FromBits(n), f), 0x7F) << Name(f) << " " << n;
  }
}

TEST(Fp8Reference, InfinitySaturatesToMax) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encode_fp8(inf, Fp8Type::kE4M3), 0x7E);
  EXPECT_EQ(encode_fp8(-inf, Fp8Type::kE4M3), 0xFE);
  EXPECT_EQ(encode_fp8(inf, Fp8Type::kE5M2), 0x7B);
  EXPECT_EQ(encode_fp8(-inf, Fp8Type::kE5M2), 0xFB);
}

TEST(Fp8Reference, ValuesPastMaxSaturate) {
  for (float v : {448.0f, 449.0f, 463.99f, 464.0f, 464.01f, 480.0f, 1e6f, FLT_MAX}) {
    EXPECT_EQ(encode_fp8(v, Fp8Type::kE4M3), 0x7E) << v;
    EXPECT_EQ(encode_fp8(-v, Fp8Type::kE4M3), 0xFE) << v;
  }
  for (float v : {57344.0f, 57345.0f, 61439.0f, 61440.0f, 61441.0f, 65536.0f, 1e30f, FLT_MAX}) {
    EXPECT_EQ(encode_fp8(v, Fp8Type::kE5M2), 0x7B) << v;
    EXPECT_EQ(encode_fp8(-v, Fp8Type::kE5M2), 0xFB) << v;
  }
  // Just below max stays below.
  EXPECT_EQ(encode_fp8(431.99f, Fp8Type::kE4M3), 0x7D);
  EXPECT_EQ(encode_fp8(53247.0f, Fp8Type::kE5M2), 0x7A);
}

TEST(Fp8Reference, SubnormalsRoundCorrectly) {
  // E4M3: smallest subnormal 2^-9, min normal 2^-6 (code 0x08).
  const float e4_sub = std::ldexp(1.0f, -9);
  EXPECT_EQ(encode_fp8(e4_sub, Fp8Type::kE4M3), 0x01);
  EXPECT_EQ(encode_fp8(e4_sub / 2, Fp8Type::kE4M3), 0x00);  // tie -> even (zero)
  EXPECT_EQ(encode_fp8(std::nextafter(e4_sub / 2, 1.0f), Fp8Type::kE4M3), 0x01);
  EXPECT_EQ(encode_fp8(-e4_sub / 2, Fp8Type::kE4M3), 0x80);
  EXPECT_EQ(encode_fp8(1.5f * e4_sub, Fp8Type::kE4M3), 0x02);  // tie 1.5 -> 2
  EXPECT_EQ(encode_fp8(2.5f * e4_sub, Fp8Type::kE4M3), 0x02);  // tie 2.5 -> 2
  EXPECT_EQ(encode_fp8(7.5f * e4_sub, Fp8Type::kE4M3), 0x08);  // rounds up into the normals
  EXPECT_EQ(encode_fp8(7.0f * e4_sub, Fp8Type::kE4M3), 0x07);
  // E5M2: smallest subnormal 2^-16, min normal 2^-14 (code 0x04).
  const float e5_sub = std::ldexp(1.0f, -16);
  EXPECT_EQ(encode_fp8(e5_sub, Fp8Type::kE5M2), 0x01);
  EXPECT_EQ(encode_fp8(e5_sub / 2, Fp8Type::kE5M2), 0x00);
  EXPECT_EQ(encode_fp8(3.5f * e5_sub, Fp8Type::kE5M2), 0x04);
  EXPECT_EQ(encode_fp8(-3.0f * e5_sub, Fp8Type::kE5M2), 0x83);
}

TEST(Fp8Reference, FloatSubnormalInputsUnderflowToSignedZero) {
  for (Fp8Type f : kFormats) {
    EXPECT_EQ(encode_fp8(FromBits(0x00000001u), f), 0x00);
    EXPECT_EQ(encode_fp8(FromBits(0x807FFFFFu), f), 0x80);
    EXPECT_EQ(encode_fp8(FLT_MIN, f), 0x00);
  }
}

// Every 4099th float bit pattern (about a million, all exponents, both signs) plus a sweep
// of the range the formats cover, against the brute-force nearest code.
TEST(Fp8Reference, EncoderMatchesNearestCodeOracle) {
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) patterns.push_back(static_cast<uint32_t>(u));
  for (uint32_t u = 0x37000000u; u < 0x47800000u; u += 1009) {  // 2^-17 .. 2^16
    patterns.push_back(u);
    patterns.push_back(u | 0x80000000u);
  }
  for (Fp8Type f : kFormats) {
    int mismatches = 0;
    for (uint32_t u : patterns) {
      const float x = FromBits(u);
      const uint8_t got = encode_fp8(x, f);
      const uint8_t want = NearestCode(x, f);
      if (got != want && ++mismatches <= 10) {
        ADD_FAILURE() << Name(f) << " x bits 0x" << std::hex << u << " got 0x" << int(got)
                      << " want 0x" << int(want);
      }
    }
    EXPECT_EQ(mismatches, 0) << Name(f);
  }
}

TEST(HalfReference, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float v = half_to_float(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 0x1F;
    const int m = h & 0x3FF;
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (e == 0x1F) {
      EXPECT_TRUE(m == 0 ? std::isinf(v) : std::isnan(v)) << h;
      continue;
    }
    const double want = e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
    EXPECT_EQ(static_cast<double>(v), want) << h;
    EXPECT_EQ(std::signbit(v), (h & 0x8000u) != 0) << h;
  }
}

// Nearest of the representable neighbours, ties to even, with the given converters.
template <typename Narrow, typename Widen>
void ExpectNearestEven(uint32_t u, Narrow narrow, Widen widen, uint16_t inf_bits) {
  const float x = FromBits(u);
  if (std::isnan(x)) return;
  const uint16_t got = narrow(x);
  const uint16_t mag = got & 0x7FFF;
  const double xv = std::fabs(static_cast<double>(x));
  const double gv = std::fabs(static_cast<double>(widen(got)));
  ASSERT_EQ((got & 0x8000) != 0, std::signbit(x)) << std::hex << u;
  // Neighbours of the result: it must be at least as close as both, ties to the even one.
  for (int delta : {-1, 1}) {
    const int n = mag + delta;
    if (n < 0 || n > inf_bits) continue;
    const double nv = static_cast<double>(widen(static_cast<uint16_t>(n)));
    if (std::isinf(nv) || std::isinf(gv)) continue;
    const double dg = std::fabs(gv - xv);
    const double dn = std::fabs(nv - xv);
    EXPECT_TRUE(dg < dn || (dg == dn && (mag & 1) == 0))
        << std::hex << "x bits 0x" << u << " got 0x" << got << " neighbour 0x" << n;
  }
}

TEST(HalfReference, FloatToHalfRoundsToNearestEven) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 7919) {
    ExpectNearestEven(static_cast<uint32_t>(u), float_to_half, half_to_float, 0x7C00);
  }
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // tie at the top rounds to Inf
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even zero
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp -> 2
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::nanf("")), kHalfNanBits);
#if defined(__FLT16_MAX__)
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65521) {
    const float x = FromBits(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &h, sizeof(hb));
    EXPECT_EQ(float_to_half(x), hb) << std::hex << u;
  }
#endif
}

TEST(Bf16Reference, FloatToBf16RoundsToNearestEven) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 7919) {
    ExpectNearestEven(static_cast<uint32_t>(u), float_to_bf16, bf16_to_float, 0x7F80);
  }
  EXPECT_EQ(float_to_bf16(FromBits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16(FromBits(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7F80);                // rounds to Inf
  EXPECT_EQ(float_to_bf16(FromBits(0x00008000u)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(float_to_bf16(FromBits(0xFFC00001u)), kBf16NanBits);
}

}  // namespace
}  // namespace fp8audit::kernels
