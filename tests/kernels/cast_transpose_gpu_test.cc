// Cast-transpose, quantize and dequantize kernels against the CPU reference, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda_launch.h"
#include "kernels/fp8_format.h"
#include "kernels/reference.h"

namespace fp8audit::kernels::testing {
namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
constexpr Fp8Type kFormats[] = {Fp8Type::kE4M3, Fp8Type::kE5M2};
constexpr float kInf = std::numeric_limits<float>::infinity();

const char* Name(DType t) {
  return t == DType::kFloat32 ? "fp32" : t == DType::kBFloat16 ? "bf16" : "fp16";
}
const char* Name(Fp8Type f) { return Fp8TypeName(f).data(); }

// Host input of `dtype` as raw bytes.
struct HostTensor {
  DType dtype;
  size_t n;
  std::vector<uint8_t> bytes;
};

HostTensor FromFloats(DType t, const std::vector<float>& v) {
  HostTensor h{t, v.size(), std::vector<uint8_t>(v.size() * dtype_size(t))};
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&h.bytes[4 * i], &v[i], 4);
    } else {
      const uint16_t b = t == DType::kBFloat16 ? float_to_bf16(v[i]) : float_to_half(v[i]);
      std::memcpy(&h.bytes[2 * i], &b, 2);
    }
  }
  return h;
}

// Values over a wide dynamic range: most moderate, some tiny (FP8 subnormals, underflow) and
// some huge (saturation), both signs.
std::vector<float> WideRandom(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = normal(rng) * (pick(rng) < 8 ? 16.0f : std::ldexp(1.0f, exponent(rng)));
  }
  return v;
}

struct CtResult {
  std::vector<uint8_t> rowwise, columnwise;
  uint32_t amax_bits, scale_inv_bits;
};

// Runs the kernel with the input placed `in_offset` bytes and the outputs `out_offset` bytes past
// an allocation's start (to exercise misaligned pointers). Outputs are poisoned first.
CtResult RunGpu(const HostTensor& x, int64_t rows, int64_t cols, float scale, Fp8Type f,
                float amax_init, size_t in_offset = 0, size_t out_offset = 0) {
  DeviceBuffer<uint8_t> in(x.bytes.size() + in_offset);
  FP8AUDIT_CUDA_CHECK(
      cudaMemcpy(in.get() + in_offset, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice));
  DeviceBuffer<uint8_t> rw(x.n + out_offset), cw(x.n + out_offset);
  rw.Fill(0xA5);
  cw.Fill(0x5A);
  DeviceBuffer<float> s(std::vector<float>{scale});
  DeviceBuffer<float> amax(std::vector<float>{amax_init});
  DeviceBuffer<float> sinv(std::vector<float>{-12345.0f});
  FP8AUDIT_CUDA_CHECK(cuda::cast_transpose(in.get() + in_offset, x.dtype, rows, cols, s.get(), f,
                                           rw.get() + out_offset, cw.get() + out_offset, amax.get(),
                                           sinv.get(), nullptr));
  FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
  CtResult r;
  auto rw_all = rw.Download();
  auto cw_all = cw.Download();
  r.rowwise.assign(rw_all.begin() + out_offset, rw_all.end());
  r.columnwise.assign(cw_all.begin() + out_offset, cw_all.end());
  r.amax_bits = float_to_bits(amax.Download()[0]);
  r.scale_inv_bits = float_to_bits(sinv.Download()[0]);
  return r;
}

CtResult RunCpu(const HostTensor& x, int64_t rows, int64_t cols, float scale, Fp8Type f,
                float amax_init) {
  CtResult r;
  r.rowwise.resize(x.n);
  r.columnwise.resize(x.n);
  float amax = amax_init;
  float sinv = 0.0f;
  ref::cast_transpose(x.bytes.data(), x.dtype, rows, cols, scale, f, r.rowwise.data(),
                      r.columnwise.data(), &amax, &sinv);
  r.amax_bits = float_to_bits(amax);
  r.scale_inv_bits = float_to_bits(sinv);
  return r;
}

::testing::AssertionResult SameResult(const CtResult& gpu, const CtResult& cpu, int64_t rows,
                                      int64_t cols) {
  std::ostringstream why;
  const int64_t r = FirstMismatch(gpu.rowwise, cpu.rowwise);
  if (r >= 0) {
    why << "rowwise differs at (" << r / cols << ", " << r % cols << "): gpu 0x" << std::hex
        << int(gpu.rowwise[r]) << " cpu 0x" << int(cpu.rowwise[r]) << std::dec << "; ";
  }
  const int64_t c = FirstMismatch(gpu.columnwise, cpu.columnwise);
  if (c >= 0) {
    why << "columnwise differs at (" << c / rows << ", " << c % rows << "): gpu 0x" << std::hex
        << int(gpu.columnwise[c]) << " cpu 0x" << int(cpu.columnwise[c]) << std::dec << "; ";
  }
  if (gpu.amax_bits != cpu.amax_bits) {
    why << "amax bits gpu 0x" << std::hex << gpu.amax_bits << " cpu 0x" << cpu.amax_bits << std::dec
        << "; ";
  }
  if (gpu.scale_inv_bits != cpu.scale_inv_bits) {
    why << "scale_inv bits gpu 0x" << std::hex << gpu.scale_inv_bits << " cpu 0x"
        << cpu.scale_inv_bits << std::dec << "; ";
  }
  const std::string s = why.str();
  if (s.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s;
}

TEST(CastTransposeGpu, BitExactWithReferenceOnRandomInputs) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1},    {1, 64},    {1, 4096},  {4096, 1},  {1, 1000},    {1000, 1},    {4, 8},
      {128, 64}, {128, 128}, {256, 384}, {129, 130}, {127, 129},   {260, 72},    {1000, 1000},
      {3, 4099}, {4099, 3},  {8192, 8},  {8, 8192},  {1024, 4096}, {2048, 1536}, {4096, 4096}};
  uint32_t seed = 1;
  for (DType t : kDTypes) {
    for (Fp8Type f : kFormats) {
      for (auto [rows, cols] : shapes) {
        const HostTensor x = FromFloats(t, WideRandom(static_cast<size_t>(rows * cols), ++seed));
        const float scale =
            std::ldexp(1.0f + static_cast<float>(seed % 7) / 7.0f, static_cast<int>(seed % 9) - 4);
        EXPECT_TRUE(SameResult(RunGpu(x, rows, cols, scale, f, 0.0f),
                               RunCpu(x, rows, cols, scale, f, 0.0f), rows, cols))
            << Name(t) << "->" << Name(f) << " " << rows << "x" << cols << " scale " << scale;
      }
    }
  }
}

// Exact FP8 values, midpoints between neighbours (ties), one ulp either side of them, NaNs of
// both signs with payloads, infinities, signed zeros, float subnormals, FLT_MAX and values past
// the formats' max, spread over full tiles and edge tiles; with ordinary and extreme scales.
std::vector<float> Adversarial(Fp8Type f, size_t n, uint32_t seed) {
  std::vector<float> special;
  for (int b = 0; b < 256; ++b) {
    const float v = decode_fp8(static_cast<uint8_t>(b), f);
    special.push_back(v);
    const float next = decode_fp8(static_cast<uint8_t>(b + 1), f);
    if ((b & 0x7F) < 0x7E && std::isfinite(v) && std::isfinite(next)) {
      const float mid = (v + next) / 2;
      special.push_back(mid);
      special.push_back(std::nextafter(mid, kInf));
      special.push_back(std::nextafter(mid, -kInf));
    }
  }
  for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFA5A5A5u, 0x7FFFFFFFu,
                        0x00000001u, 0x807FFFFFu, 0x00400000u, 0x80000000u, 0x00000000u}) {
    special.push_back(bits_to_float(bits));
  }
  for (float v : {kInf, -kInf, FLT_MAX, -FLT_MAX, 448.0f, 464.0f, 465.0f, 57344.0f, 61440.0f, 1e5f,
                  -1e9f, FLT_MIN, -FLT_MIN}) {
    special.push_back(v);
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, special.size() - 1);
  std::vector<float> v(n);
  for (auto& x : v) x = special[pick(rng)];
  return v;
}

TEST(CastTransposeGpu, BitExactOnAdversarialInputs) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const float scales[] = {1.0f, 0.5f,  3.0f, std::ldexp(1.0f, -10), std::ldexp(1.0f, 20),
                          0.0f, -2.0f, kInf, std::nanf(""),         1e-40f};
  const std::pair<int64_t, int64_t> shapes[] = {{512, 384}, {333, 257}, {1, 999}, {999, 1}};
  uint32_t seed = 100;
  for (DType t : kDTypes) {
    for (Fp8Type f : kFormats) {
      for (auto [rows, cols] : shapes) {
        for (float scale : scales) {
          const HostTensor x =
              FromFloats(t, Adversarial(f, static_cast<size_t>(rows * cols), ++seed));
          EXPECT_TRUE(SameResult(RunGpu(x, rows, cols, scale, f, 0.0f),
                                 RunCpu(x, rows, cols, scale, f, 0.0f), rows, cols))
              << Name(t) << "->" << Name(f) << " " << rows << "x" << cols << " scale " << scale;
        }
      }
    }
  }
}

TEST(CastTransposeGpu, BitExactOnEverySixteenBitPattern) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  // 65536 patterns (NaN payloads, infinities, subnormals) shuffled into 256 x 256 and 255 x 257.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::shuffle(all.begin(), all.end(), std::mt19937(9));
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    HostTensor x{t, all.size(), std::vector<uint8_t>(all.size() * 2)};
    std::memcpy(x.bytes.data(), all.data(), x.bytes.size());
    for (Fp8Type f : kFormats) {
      for (float scale : {1.0f, 0.25f, 1024.0f}) {
        EXPECT_TRUE(SameResult(RunGpu(x, 256, 256, scale, f, 0.0f),
                               RunCpu(x, 256, 256, scale, f, 0.0f), 256, 256))
            << Name(t) << "->" << Name(f);
        HostTensor y{t, 255 * 257,
                     std::vector<uint8_t>(x.bytes.begin(), x.bytes.begin() + 255 * 257 * 2)};
        EXPECT_TRUE(SameResult(RunGpu(y, 255, 257, scale, f, 0.0f),
                               RunCpu(y, 255, 257, scale, f, 0.0f), 255, 257))
            << Name(t) << "->" << Name(f);
      }
    }
  }
}

// Small enough for compute-sanitizer: one or two full tiles plus edge tiles, every dtype.
TEST(CastTransposeGpu, SmallTensorsWithFullAndEdgeTiles) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{128, 128}, {132, 136}, {256, 64}};
  for (DType t : kDTypes) {
    for (auto [rows, cols] : shapes) {
      const HostTensor x = FromFloats(t, WideRandom(static_cast<size_t>(rows * cols), 41));
      EXPECT_TRUE(SameResult(RunGpu(x, rows, cols, 0.5f, Fp8Type::kE5M2, 0.0f),
                             RunCpu(x, rows, cols, 0.5f, Fp8Type::kE5M2, 0.0f), rows, cols))
          << Name(t) << " " << rows << "x" << cols;
    }
  }
}

TEST(CastTransposeGpu, MisalignedPointersTakeTheScalarPathCorrectly) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  for (DType t : kDTypes) {
    const HostTensor x = FromFloats(t, WideRandom(512 * 256, 17));
    const size_t elem = static_cast<size_t>(dtype_size(t));
    const std::vector<std::pair<size_t, size_t>> offsets = {{elem, 0}, {0, 1}, {elem, 3}};
    for (auto [in_off, out_off] : offsets) {
      EXPECT_TRUE(SameResult(RunGpu(x, 512, 256, 1.5f, Fp8Type::kE4M3, 0.0f, in_off, out_off),
                             RunCpu(x, 512, 256, 1.5f, Fp8Type::kE4M3, 0.0f), 512, 256))
          << Name(t) << " offsets " << in_off << "/" << out_off;
    }
  }
}

TEST(CastTransposeGpu, AmaxOnlyRises) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const HostTensor x = FromFloats(DType::kBFloat16, std::vector<float>(1024, -3.0f));
  EXPECT_EQ(bits_to_float(RunGpu(x, 32, 32, 1.0f, Fp8Type::kE4M3, 0.0f).amax_bits), 3.0f);
  EXPECT_EQ(bits_to_float(RunGpu(x, 32, 32, 1.0f, Fp8Type::kE4M3, 1000.0f).amax_bits), 1000.0f);
  EXPECT_TRUE(
      std::isnan(bits_to_float(RunGpu(x, 32, 32, 1.0f, Fp8Type::kE4M3, std::nanf("")).amax_bits)));
}

// The published amax and the outputs describe the same data: wherever the largest element sits
// (any tile, any block), amax equals it and its FP8 code is encode(amax * scale).
TEST(CastTransposeGpu, AmaxAndOutputsAreConsistentWhereverTheMaximumIs) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const int64_t rows = 2048, cols = 2048;
  std::mt19937 rng(23);
  std::uniform_int_distribution<int64_t> pos(0, rows * cols - 1);
  std::vector<float> v = WideRandom(static_cast<size_t>(rows * cols), 29);
  for (auto& x : v) x = std::fmax(-100.0f, std::fmin(100.0f, x));
  for (DType t : kDTypes) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> w = v;
      const int64_t p = pos(rng);
      const float planted = (trial % 2 ? -1.0f : 1.0f) * (200.0f + static_cast<float>(trial));
      w[p] = planted;
      const HostTensor x = FromFloats(t, w);
      const float scale = 2.0f;
      const CtResult r = RunGpu(x, rows, cols, scale, Fp8Type::kE4M3, 0.0f);
      const float amax = bits_to_float(r.amax_bits);
      EXPECT_EQ(amax, std::fabs(planted)) << Name(t) << " position " << p;
      const uint8_t want = encode_fp8(std::copysign(amax, planted) * scale, Fp8Type::kE4M3);
      EXPECT_EQ(r.rowwise[p], want);
      EXPECT_EQ(r.columnwise[(p % cols) * rows + p / cols], want);
    }
  }
}

TEST(QuantizeGpu, BitExactWithReference) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const size_t sizes[] = {1, 3, 7, 8, 9, 1000, 4097, 1u << 20, (1u << 22) + 5};
  uint32_t seed = 300;
  for (DType t : kDTypes) {
    for (Fp8Type f : kFormats) {
      for (size_t n : sizes) {
        for (size_t offset : {size_t{0}, static_cast<size_t>(dtype_size(t))}) {
          const HostTensor x = FromFloats(t, WideRandom(n, ++seed));
          const size_t out_off = offset != 0 ? 1 : 0;
          DeviceBuffer<uint8_t> in(x.bytes.size() + offset), out(n + 1);
          FP8AUDIT_CUDA_CHECK(cudaMemcpy(in.get() + offset, x.bytes.data(), x.bytes.size(),
                                         cudaMemcpyHostToDevice));
          out.Fill(0xA5);
          DeviceBuffer<float> s(std::vector<float>{0.75f}), amax(std::vector<float>{0.0f}),
              sinv(std::vector<float>{0.0f});
          FP8AUDIT_CUDA_CHECK(cuda::quantize(in.get() + offset, t, static_cast<int64_t>(n), s.get(),
                                             f, out.get() + out_off, amax.get(), sinv.get(),
                                             nullptr));
          FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<uint8_t> want(n);
          float want_amax = 0.0f, want_sinv = 0.0f;
          ref::quantize(x.bytes.data(), t, n, 0.75f, f, want.data(), &want_amax, &want_sinv);
          const auto got_all = out.Download();
          const std::vector<uint8_t> got(got_all.begin() + out_off, got_all.begin() + out_off + n);
          EXPECT_EQ(FirstMismatch(got, want), -1) << Name(t) << "->" << Name(f) << " n " << n;
          EXPECT_EQ(float_to_bits(amax.Download()[0]), float_to_bits(want_amax));
          EXPECT_EQ(float_to_bits(sinv.Download()[0]), float_to_bits(want_sinv));
        }
      }
    }
  }
}

TEST(DequantizeGpu, BitExactWithReference) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  std::vector<uint8_t> codes(256 * 41 + 7);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 97 + i / 256);
  DeviceBuffer<uint8_t> in(codes);
  const float scale_invs[] = {
      1.0f, 0.5f, 3.0f, 1e-40f, 0.0f, kInf, std::nanf(""), std::ldexp(1.0f, 100), -7.0f};
  for (Fp8Type f : kFormats) {
    for (DType out_t : kDTypes) {
      for (float si : scale_invs) {
        DeviceBuffer<float> sinv(std::vector<float>{si});
        DeviceBuffer<uint8_t> out(codes.size() * dtype_size(out_t));
        out.Fill(0xA5);
        FP8AUDIT_CUDA_CHECK(cuda::dequantize(in.get(), static_cast<int64_t>(codes.size()),
                                             sinv.get(), f, out_t, out.get(), nullptr));
        FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<uint8_t> want(codes.size() * dtype_size(out_t));
        ref::dequantize(codes.data(), codes.size(), si, f, out_t, want.data());
        EXPECT_EQ(FirstMismatch(out.Download(), want), -1)
            << Name(f) << "->" << Name(out_t) << " scale_inv " << si;
      }
    }
  }
}

TEST(CastTransposeGpu, LaunchersRejectInvalidArguments) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  DeviceBuffer<float> buf(64);
  auto* b = reinterpret_cast<uint8_t*>(buf.get());
  EXPECT_EQ(cuda::cast_transpose(nullptr, DType::kFloat32, 4, 4, buf.get(), Fp8Type::kE4M3, b, b,
                                 buf.get(), buf.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::cast_transpose(buf.get(), DType::kFloat32, 0, 4, buf.get(), Fp8Type::kE4M3, b, b,
                                 buf.get(), buf.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantize(buf.get(), DType::kFloat32, -1, buf.get(), Fp8Type::kE4M3, b, buf.get(),
                           buf.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::dequantize(b, 4, nullptr, Fp8Type::kE4M3, DType::kFloat32, buf.get(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace fp8audit::kernels::testing
