// The torch::Tensor API on CPU tensors: results equal the reference, bad arguments throw errors
// that name the argument, and the op library registers torch.ops.fp8audit.*.
#include "kernels/torch_api.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/reference.h"

namespace fp8audit::kernels {
namespace {

// Runs fn, expecting a c10::Error whose message contains every fragment.
void ExpectErrorMentioning(const std::function<void()>& fn,
                           std::initializer_list<const char*> fragments) {
  try {
    fn();
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    for (const char* f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos) << "missing '" << f << "' in: " << message;
    }
    return;
  }
  ADD_FAILURE() << "no c10::Error thrown";
}

at::Tensor Scalar(float v) { return at::full({1}, v, at::kFloat); }

std::vector<uint8_t> Bytes(const at::Tensor& t) {
  const auto* p = t.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + t.numel());
}

uint32_t Bits(const at::Tensor& t) { return float_to_bits(t.item<float>()); }

TEST(TorchApi, CastTransposeMatchesReferenceOnCpu) {
  at::manual_seed(1);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor x = (at::randn({6, 7, 33}) * 40).to(dtype);
    at::Tensor amax = Scalar(0.0f), scale_inv = Scalar(0.0f);
    auto [rw, cw] = cast_transpose(x, Scalar(2.0f), amax, scale_inv, Fp8Type::kE4M3);
    EXPECT_EQ(rw.sizes(), x.sizes());
    EXPECT_EQ(cw.sizes(), (at::IntArrayRef{33, 42}));
    EXPECT_EQ(rw.scalar_type(), at::kByte);
    std::vector<uint8_t> want_rw(x.numel()), want_cw(x.numel());
    float want_amax = 0.0f, want_si = 0.0f;
    const DType t = dtype == at::kFloat      ? DType::kFloat32
                    : dtype == at::kBFloat16 ? DType::kBFloat16
                                             : DType::kFloat16;
    ref::cast_transpose(x.data_ptr(), t, 42, 33, 2.0f, Fp8Type::kE4M3, want_rw.data(),
                        want_cw.data(), &want_amax, &want_si);
    EXPECT_EQ(Bytes(rw), want_rw);
    EXPECT_EQ(Bytes(cw), want_cw);
    EXPECT_EQ(Bits(amax), float_to_bits(want_amax));
    EXPECT_EQ(Bits(scale_inv), float_to_bits(0.5f));
  }
}

TEST(TorchApi, QuantizeThenDequantizeRecoversRepresentableValues) {
  const at::Tensor x = at::tensor({1.0f, -2.0f, 0.5f, 448.0f, -0.0f}, at::kFloat);
  at::Tensor amax = Scalar(0.0f), scale_inv = Scalar(0.0f);
  const at::Tensor q = quantize(x, Scalar(1.0f), amax, scale_inv, Fp8Type::kE4M3);
  EXPECT_EQ(amax.item<float>(), 448.0f);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor y = dequantize(q, scale_inv, Fp8Type::kE4M3, dtype);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(at::equal(y.to(at::kFloat), x)) << dtype;
  }
}

TEST(TorchApi, DelayedScalingUpdateMatchesReference) {
  at::Tensor history = at::rand({8, 5}) * 10;
  at::Tensor scale = at::ones({5}), scale_inv = at::ones({5});
  std::vector<float> h(history.data_ptr<float>(), history.data_ptr<float>() + 40);
  std::vector<float> s(5, 1.0f), si(5, 1.0f);
  delayed_scaling_update(history, scale, scale_inv, Fp8Type::kE5M2, 2, AmaxAlgo::kMax);
  ref::delayed_scaling_update(h.data(), 8, 5, s.data(), si.data(), Fp8Type::kE5M2, 2,
                              AmaxAlgo::kMax);
  EXPECT_EQ(0, std::memcmp(history.data_ptr<float>(), h.data(), 40 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(scale.data_ptr<float>(), s.data(), 5 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(scale_inv.data_ptr<float>(), si.data(), 5 * sizeof(float)));
}

TEST(TorchApi, RejectsWrongInputDtype) {
  ExpectErrorMentioning(
      [] {
        cast_transpose(at::ones({4, 4}, at::kInt), Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3);
      },
      {"fp8audit.cast_transpose", "'input'", "float32, bfloat16 or float16", "Int"});
  ExpectErrorMentioning(
      [] { quantize(at::ones({4}, at::kDouble), Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
      {"fp8audit.quantize", "'input'", "Double"});
}

TEST(TorchApi, RejectsEmptyInput) {
  ExpectErrorMentioning(
      [] {
        cast_transpose(at::ones({0, 4}), Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3);
      },
      {"'input'", "must not be empty"});
  ExpectErrorMentioning(
      [] { dequantize(at::ones({0}, at::kByte), Scalar(1), Fp8Type::kE4M3, at::kFloat); },
      {"'data'", "must not be empty"});
}

TEST(TorchApi, RejectsNonContiguousInput) {
  const at::Tensor x = at::ones({8, 6}).t();
  ExpectErrorMentioning([&] { cast_transpose(x, Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
                        {"'input'", "must be contiguous"});
}

TEST(TorchApi, RejectsZeroDimensionalInputForCastTranspose) {
  ExpectErrorMentioning(
      [] { cast_transpose(at::ones({}), Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
      {"'input'", "at least 1 dimension"});
}

TEST(TorchApi, RejectsScaleAmaxAndScaleInvOfTheWrongSizeOrDtype) {
  const at::Tensor x = at::ones({4, 4});
  ExpectErrorMentioning(
      [&] { cast_transpose(x, at::ones({2}), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
      {"'scale'", "1 element"});
  ExpectErrorMentioning(
      [&] { cast_transpose(x, Scalar(1), at::zeros({3}), Scalar(0), Fp8Type::kE4M3); },
      {"'amax'", "1 element"});
  ExpectErrorMentioning(
      [&] { cast_transpose(x, Scalar(1), Scalar(0), at::zeros({0}), Fp8Type::kE4M3); },
      {"'scale_inv'", "1 element"});
  ExpectErrorMentioning(
      [&] { cast_transpose(x, Scalar(1), at::zeros({1}, at::kDouble), Scalar(0), Fp8Type::kE4M3); },
      {"'amax'", "float32", "Double"});
  ExpectErrorMentioning(
      [&] { dequantize(at::ones({4}, at::kByte), at::ones({2}), Fp8Type::kE4M3, at::kFloat); },
      {"'scale_inv'", "1 element"});
}

TEST(TorchApi, RejectsUndefinedTensors) {
  ExpectErrorMentioning(
      [] { cast_transpose(at::Tensor(), Scalar(1), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
      {"'input'", "undefined"});
  ExpectErrorMentioning(
      [] { quantize(at::ones({2}), at::Tensor(), Scalar(0), Scalar(0), Fp8Type::kE4M3); },
      {"'scale'", "undefined"});
}

TEST(TorchApi, RejectsArgumentsThatShareMemory) {
  const at::Tensor x = at::ones({4, 4});
  const at::Tensor s = Scalar(1);
  ExpectErrorMentioning([&] { cast_transpose(x, s, s, Scalar(0), Fp8Type::kE4M3); },
                        {"'scale'", "'amax'", "share memory"});
  const at::Tensor both = at::zeros({2});
  ExpectErrorMentioning(
      [&] { quantize(x, s, both.slice(0, 0, 1), both.slice(0, 0, 1), Fp8Type::kE4M3); },
      {"'amax'", "'scale_inv'", "share memory"});
}

TEST(TorchApi, RejectsUnknownFormatAndAlgorithmNames) {
  ExpectErrorMentioning([] { parse_fp8_format("e4m3fn", "fp8audit.quantize"); },
                        {"'fp8_format'", "e4m3fn"});
  ExpectErrorMentioning([] { parse_amax_algo("mean", "fp8audit.delayed_scaling_update"); },
                        {"'amax_algo'", "mean"});
}

TEST(TorchApi, RejectsBadDequantizeArguments) {
  ExpectErrorMentioning(
      [] { dequantize(at::ones({4}, at::kChar), Scalar(1), Fp8Type::kE4M3, at::kFloat); },
      {"'data'", "uint8"});
  ExpectErrorMentioning(
      [] { dequantize(at::ones({4}, at::kByte), Scalar(1), Fp8Type::kE4M3, at::kInt); },
      {"'out_dtype'"});
}

TEST(TorchApi, RejectsBadDelayedScalingArguments) {
  const at::Tensor h = at::zeros({4, 3});
  ExpectErrorMentioning(
      [&] {
        delayed_scaling_update(at::zeros({12}), at::ones({3}), at::ones({3}), Fp8Type::kE4M3, 0,
                               AmaxAlgo::kMax);
      },
      {"'amax_history'", "2-D"});
  ExpectErrorMentioning(
      [&] {
        delayed_scaling_update(h, at::ones({2}), at::ones({3}), Fp8Type::kE4M3, 0, AmaxAlgo::kMax);
      },
      {"'scale'", "3 elements"});
  ExpectErrorMentioning(
      [&] {
        delayed_scaling_update(h, at::ones({3}), at::ones({3}, at::kHalf), Fp8Type::kE4M3, 0,
                               AmaxAlgo::kMax);
      },
      {"'scale_inv'", "float32"});
  ExpectErrorMentioning(
      [&] {
        delayed_scaling_update(h, at::ones({3}), at::ones({3}), Fp8Type::kE4M3, 200,
                               AmaxAlgo::kMax);
      },
      {"'margin'"});
  ExpectErrorMentioning(
      [&] {
        delayed_scaling_update(at::zeros({4, 6}).t(), at::ones({4}), at::ones({4}), Fp8Type::kE4M3,
                               0, AmaxAlgo::kMax);
      },
      {"'amax_history'", "contiguous"});
  const at::Tensor s = at::ones({3});
  ExpectErrorMentioning([&] { delayed_scaling_update(h, s, s, Fp8Type::kE4M3, 0, AmaxAlgo::kMax); },
                        {"'scale'", "'scale_inv'", "share memory"});
}

TEST(TorchApi, FailedChecksLeaveOutputsUntouched) {
  at::Tensor amax = Scalar(7.0f), scale_inv = Scalar(3.0f);
  EXPECT_THROW(cast_transpose(at::ones({4, 4}), at::ones({2}), amax, scale_inv, Fp8Type::kE4M3),
               c10::Error);
  EXPECT_EQ(amax.item<float>(), 7.0f);
  EXPECT_EQ(scale_inv.item<float>(), 3.0f);
}

// torch.ops.load_library(path) is a dlopen of the op library; do the same and call through the
// dispatcher with boxed arguments, as Python does.
TEST(TorchOps, LoadLibraryRegistersFp8auditOps) {
  void* handle = dlopen(FP8AUDIT_OPS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const char* name : {"fp8audit::cast_transpose", "fp8audit::quantize", "fp8audit::dequantize",
                           "fp8audit::delayed_scaling_update"}) {
    EXPECT_TRUE(dispatcher.findSchema({name, ""}).has_value()) << name;
  }
  const at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).reshape({2, 3});
  at::Tensor amax = Scalar(0.0f), scale_inv = Scalar(0.0f);
  const auto op = dispatcher.findSchemaOrThrow("fp8audit::cast_transpose", "");
  torch::jit::Stack stack{x, Scalar(1.0f), amax, scale_inv, std::string("e4m3")};
  op.callBoxed(&stack);
  ASSERT_EQ(stack.size(), 2u);
  const at::Tensor rw = stack[0].toTensor();
  const at::Tensor cw = stack[1].toTensor();
  EXPECT_EQ(cw.sizes(), (at::IntArrayRef{3, 2}));
  EXPECT_EQ(rw.data_ptr<uint8_t>()[1], encode_fp8(2.0f, Fp8Type::kE4M3));
  EXPECT_EQ(cw.data_ptr<uint8_t>()[1], encode_fp8(4.0f, Fp8Type::kE4M3));
  EXPECT_EQ(amax.item<float>(), 6.0f);

  torch::jit::Stack bad{x, Scalar(1.0f), amax, scale_inv, std::string("e3m4")};
  ExpectErrorMentioning([&] { op.callBoxed(&bad); }, {"'fp8_format'", "e3m4"});

  const auto update = dispatcher.findSchemaOrThrow("fp8audit::delayed_scaling_update", "");
  at::Tensor history = at::full({2, 1}, 2.0f), scale = at::ones({1}), sinv = at::ones({1});
  torch::jit::Stack args{history, scale, sinv, std::string("e4m3"), int64_t{0}, std::string("max")};
  update.callBoxed(&args);
  EXPECT_EQ(scale.item<float>(), 224.0f);
}

}  // namespace
}  // namespace fp8audit::kernels
