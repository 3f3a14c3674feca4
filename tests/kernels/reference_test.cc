// CPU references: quantize, cast-transpose, dequantize and the DelayedScaling update.
#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) { return float_to_bits(f); }

std::vector<float> RandomFloats(size_t n, uint32_t seed, float spread = 8.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng) * spread;
  return v;
}

TEST(CastTransposeReference, ColumnwiseIsTransposeOfRowwiseForOddShapes) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},    {1, 37},  {37, 1},   {3, 5},
                                                {129, 67}, {64, 64}, {65, 128}, {200, 3}};
  for (auto [rows, cols] : shapes) {
    const auto x = RandomFloats(static_cast<size_t>(rows * cols), 7);
    std::vector<uint8_t> rw(x.size()), cw(x.size());
    float amax = 0.0f, scale_inv = 0.0f;
    ref::cast_transpose(x.data(), DType::kFloat32, rows, cols, 2.0f, Fp8Type::kE4M3, rw.data(),
                        cw.data(), &amax, &scale_inv);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(rw[r * cols + c], cw[c * rows + r])
            << rows << "x" << cols << " at " << r << "," << c;
        ASSERT_EQ(rw[r * cols + c], encode_fp8(x[r * cols + c] * 2.0f, Fp8Type::kE4M3));
      }
    }
  }
}

TEST(CastTransposeReference, RowwiseMatchesQuantize) {
  const auto x = RandomFloats(1000, 11, 300.0f);
  for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
    std::vector<uint8_t> rw(x.size()), cw(x.size()), q(x.size());
    float amax_ct = 0.0f, amax_q = 0.0f, si_ct = 0.0f, si_q = 0.0f;
    ref::cast_transpose(x.data(), DType::kFloat32, 25, 40, 1.5f, f, rw.data(), cw.data(), &amax_ct,
                        &si_ct);
    ref::quantize(x.data(), DType::kFloat32, x.size(), 1.5f, f, q.data(), &amax_q, &si_q);
    EXPECT_EQ(rw, q);
    EXPECT_EQ(Bits(amax_ct), Bits(amax_q));
    EXPECT_EQ(Bits(si_ct), Bits(si_q));
  }
}

TEST(CastTransposeReference, AmaxIsMaxAbsAndOnlyRises) {
  const std::vector<float> x = {1.0f, -3.0f, 2.5f, -0.0f};
  std::vector<uint8_t> rw(4), cw(4);
  float amax = 0.0f, si = 0.0f;
  ref::cast_transpose(x.data(), DType::kFloat32, 2, 2, 1.0f, Fp8Type::kE4M3, rw.data(), cw.data(),
                      &amax, &si);
  EXPECT_EQ(amax, 3.0f);
  amax = 10.0f;
  ref::cast_transpose(x.data(), DType::kFloat32, 2, 2, 1.0f, Fp8Type::kE4M3, rw.data(), cw.data(),
                      &amax, &si);
  EXPECT_EQ(amax, 10.0f);
}

TEST(CastTransposeReference, AmaxPropagatesInfAndNaN) {
  std::vector<float> x = {1.0f, -kInf, 2.0f, 0.5f};
  std::vector<uint8_t> rw(4), cw(4);
  float amax = 0.0f, si = 0.0f;
  ref::cast_transpose(x.data(), DType::kFloat32, 2, 2, 1.0f, Fp8Type::kE4M3, rw.data(), cw.data(),
                      &amax, &si);
  EXPECT_EQ(Bits(amax), Bits(kInf));
  EXPECT_EQ(rw[1], 0xFE);             // -Inf saturates
  x[2] = bits_to_float(0xFFC01234u);  // negative NaN with a payload
  amax = 0.0f;
  ref::cast_transpose(x.data(), DType::kFloat32, 2, 2, 1.0f, Fp8Type::kE4M3, rw.data(), cw.data(),
                      &amax, &si);
  EXPECT_EQ(Bits(amax), 0x7FC01234u);  // |NaN| keeps its payload, sign cleared
  EXPECT_EQ(rw[2], 0x7F);
  EXPECT_EQ(cw[0 * 2 + 1], 0x7F);  // element (1, 0) = x[2] at columnwise (0, 1)
}

TEST(CastTransposeReference, ScaleInvIsReciprocalWithCanonicalNaN) {
  const float x = 1.0f;
  uint8_t rw = 0, cw = 0;
  float amax = 0.0f, si = 0.0f;
  for (float scale : {1.0f, 3.0f, 0.1f, 1e-40f, 0.0f, -0.0f, kInf}) {
    ref::cast_transpose(&x, DType::kFloat32, 1, 1, scale, Fp8Type::kE4M3, &rw, &cw, &amax, &si);
    EXPECT_EQ(Bits(si), Bits(1.0f / scale)) << scale;
  }
  ref::cast_transpose(&x, DType::kFloat32, 1, 1, bits_to_float(0xFFC00001u), Fp8Type::kE4M3, &rw,
                      &cw, &amax, &si);
  EXPECT_EQ(Bits(si), kCanonicalNanBits);
  EXPECT_EQ(rw, 0x7F);
}

TEST(CastTransposeReference, SixteenBitInputsMatchFloatInputsOfTheSameValues) {
  std::mt19937 rng(5);
  std::vector<uint16_t> h(777);
  for (auto& v : h) v = static_cast<uint16_t>(rng());
  h[3] = 0x7C00;  // +Inf (fp16)
  h[4] = 0xFE00;  // NaN (fp16), negative
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<float> wide(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      wide[i] = t == DType::kBFloat16 ? bf16_to_float(h[i]) : half_to_float(h[i]);
    }
    for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
      std::vector<uint8_t> rw16(h.size()), cw16(h.size()), rw32(h.size()), cw32(h.size());
      float a16 = 0, a32 = 0, s16 = 0, s32 = 0;
      ref::cast_transpose(h.data(), t, 21, 37, 0.75f, f, rw16.data(), cw16.data(), &a16, &s16);
      ref::cast_transpose(wide.data(), DType::kFloat32, 21, 37, 0.75f, f, rw32.data(), cw32.data(),
                          &a32, &s32);
      EXPECT_EQ(rw16, rw32);
      EXPECT_EQ(cw16, cw32);
      EXPECT_EQ(Bits(a16), Bits(a32));
    }
  }
}

TEST(DequantizeReference, InvertsEncodingForEveryCode) {
  for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
    std::vector<uint8_t> codes(256);
    for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
    std::vector<float> out(256);
    ref::dequantize(codes.data(), 256, 0.5f, f, DType::kFloat32, out.data());
    for (int i = 0; i < 256; ++i) {
      const float d = decode_fp8(codes[i], f);
      if (std::isnan(d)) {
        EXPECT_EQ(Bits(out[i]), kCanonicalNanBits);
      } else {
        EXPECT_EQ(Bits(out[i]), Bits(d * 0.5f)) << i;
        if (!std::isinf(d)) {
          EXPECT_EQ(encode_fp8(out[i] * 2.0f, f), codes[i]) << i;
        }
      }
    }
    std::vector<uint16_t> half(256), bf(256);
    ref::dequantize(codes.data(), 256, 0.5f, f, DType::kFloat16, half.data());
    ref::dequantize(codes.data(), 256, 0.5f, f, DType::kBFloat16, bf.data());
    for (int i = 0; i < 256; ++i) {
      EXPECT_EQ(half[i], float_to_half(out[i])) << i;
      EXPECT_EQ(bf[i], float_to_bf16(out[i])) << i;
    }
  }
}

// History [H, T] helpers.
struct State {
  int64_t h, t;
  std::vector<float> history, scale, scale_inv;
  State(int64_t h_, int64_t t_) : h(h_), t(t_), history(h_ * t_), scale(t_, 1.0f), scale_inv(t_) {}
  float& at(int64_t row, int64_t col) { return history[row * t + col]; }
  void Update(Fp8Type f, int margin, AmaxAlgo algo) {
    ref::delayed_scaling_update(history.data(), h, t, scale.data(), scale_inv.data(), f, margin,
                                algo);
  }
};

TEST(DelayedScalingReference, RollsHistoryAndZeroesTheCurrentSlot) {
  State s(4, 2);
  for (int r = 0; r < 4; ++r) {
    s.at(r, 0) = static_cast<float>(r + 1);         // 1 2 3 4
    s.at(r, 1) = static_cast<float>(10 * (r + 1));  // 10 20 30 40
  }
  s.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
  // Row i takes row i+1, the last row takes the old row 0, then row 0 is cleared.
  EXPECT_EQ(s.at(0, 0), 0.0f);
  EXPECT_EQ(s.at(1, 0), 3.0f);
  EXPECT_EQ(s.at(2, 0), 4.0f);
  EXPECT_EQ(s.at(3, 0), 1.0f);
  EXPECT_EQ(s.at(3, 1), 10.0f);
  EXPECT_EQ(Bits(s.at(0, 1)), 0u);  // +0
}

TEST(DelayedScalingReference, MaxUsesTheWholeHistoryAndMostRecentTheCurrentSlot) {
  State a(3, 1), b(3, 1);
  a.at(0, 0) = b.at(0, 0) = 2.0f;
  a.at(1, 0) = b.at(1, 0) = 8.0f;
  a.at(2, 0) = b.at(2, 0) = 4.0f;
  a.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
  b.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMostRecent);
  EXPECT_EQ(a.scale[0], 448.0f / 8.0f);
  EXPECT_EQ(b.scale[0], 448.0f / 2.0f);
}

TEST(DelayedScalingReference, ScaleIsFp8MaxOverAmaxOverTwoToTheMargin) {
  for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
    for (int margin : {0, 1, 3, -2}) {
      State s(2, 1);
      s.at(0, 0) = 3.7f;
      s.Update(f, margin, AmaxAlgo::kMax);
      const float want = (fp8_max(f) / 3.7f) / std::ldexp(1.0f, margin);
      EXPECT_EQ(Bits(s.scale[0]), Bits(want)) << margin;
      EXPECT_EQ(Bits(s.scale_inv[0]), Bits(1.0f / want));
    }
  }
}

TEST(DelayedScalingReference, ZeroOrNonFiniteAmaxKeepsThePreviousScale) {
  for (float amax : {0.0f, -0.0f, kInf, std::nanf(""), -1.0f}) {
    State s(1, 1);
    s.scale[0] = 5.5f;
    s.at(0, 0) = amax;
    s.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
    EXPECT_EQ(s.scale[0], 5.5f) << amax;
    EXPECT_EQ(Bits(s.scale_inv[0]), Bits(1.0f / 5.5f));
  }
  // A NaN anywhere in the history poisons the max.
  State s(3, 1);
  s.scale[0] = 2.0f;
  s.at(0, 0) = 1.0f;
  s.at(2, 0) = std::nanf("");
  s.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
  EXPECT_EQ(s.scale[0], 2.0f);
}

TEST(DelayedScalingReference, InfiniteScaleBecomesFltMax) {
  State s(1, 2);
  s.at(0, 0) = bits_to_float(1u);  // smallest subnormal: 448 / amax overflows
  s.scale[1] = kInf;               // a kept infinite scale is clamped too
  s.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
  EXPECT_EQ(s.scale[0], FLT_MAX);
  EXPECT_EQ(s.scale[1], FLT_MAX);
  EXPECT_EQ(Bits(s.scale_inv[0]), Bits(1.0f / FLT_MAX));
}

TEST(DelayedScalingReference, HistoryOfLengthOneWorks) {
  State s(1, 3);
  s.at(0, 0) = 448.0f;
  s.at(0, 1) = 1.0f;
  s.at(0, 2) = 0.0f;
  s.Update(Fp8Type::kE4M3, 0, AmaxAlgo::kMostRecent);
  EXPECT_EQ(s.scale[0], 1.0f);
  EXPECT_EQ(s.scale[1], 448.0f);
  EXPECT_EQ(s.scale[2], 1.0f);
  EXPECT_EQ(s.history, std::vector<float>(3, 0.0f));
}

TEST(DelayedScalingReference, ManyStepsMatchAStraightforwardModel) {
  // An independent model of the update (history as a deque of past amaxes) over many steps.
  const int64_t h = 5;
  State s(h, 1);
  std::vector<float> past;  // oldest first, at most h-1 entries
  float model_scale = 1.0f;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(0.01f, 100.0f);
  for (int step = 0; step < 200; ++step) {
    const float current = dist(rng);
    s.at(0, 0) = current;
    float amax = current;
    for (float p : past) amax = std::max(amax, p);
    model_scale = (448.0f / amax) / 2.0f;
    past.push_back(current);
    if (static_cast<int64_t>(past.size()) > h - 1) past.erase(past.begin());
    s.Update(Fp8Type::kE4M3, 1, AmaxAlgo::kMax);
    ASSERT_EQ(Bits(s.scale[0]), Bits(model_scale)) << step;
    for (int64_t i = 0; i < static_cast<int64_t>(past.size()); ++i) {
      // The newest entry sits in the last row; older ones above it.
      ASSERT_EQ(s.at(h - 1 - i, 0), past[past.size() - 1 - i]) << step;
    }
  }
}

}  // namespace
}  // namespace fp8audit::kernels
