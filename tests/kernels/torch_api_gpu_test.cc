// The torch API on CUDA tensors: the same bits as the CPU path, and device checks.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "gpu_test_util.h"
#include "kernels/fp8_format.h"
#include "kernels/torch_api.h"

namespace fp8audit::kernels {
namespace {

bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().contiguous();
  const at::Tensor y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST(TorchApiGpu, CudaResultsMatchTheCpuPathBitForBit) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cuda_kernels_available());
  at::manual_seed(3);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
      const at::Tensor x = (at::randn({3, 300, 520}) * 100).to(dtype);
      const at::Tensor scale = at::full({1}, 1.75f);
      at::Tensor amax_c = at::zeros({1}), sinv_c = at::zeros({1});
      at::Tensor amax_g = amax_c.to(at::kCUDA), sinv_g = sinv_c.to(at::kCUDA);
      auto [rw_c, cw_c] = cast_transpose(x, scale, amax_c, sinv_c, f);
      auto [rw_g, cw_g] = cast_transpose(x.to(at::kCUDA), scale.to(at::kCUDA), amax_g, sinv_g, f);
      EXPECT_TRUE(rw_g.is_cuda());
      EXPECT_TRUE(SameBits(rw_g, rw_c));
      EXPECT_TRUE(SameBits(cw_g, cw_c));
      EXPECT_TRUE(SameBits(amax_g, amax_c));
      EXPECT_TRUE(SameBits(sinv_g, sinv_c));
      const at::Tensor q_c = quantize(x, scale, amax_c, sinv_c, f);
      const at::Tensor q_g = quantize(x.to(at::kCUDA), scale.to(at::kCUDA), amax_g, sinv_g, f);
      EXPECT_TRUE(SameBits(q_g, q_c));
      for (auto out : {at::kFloat, at::kBFloat16, at::kHalf}) {
        EXPECT_TRUE(SameBits(dequantize(q_g, sinv_g, f, out), dequantize(q_c, sinv_c, f, out)));
      }
    }
  }
  at::Tensor h_c = at::rand({16, 9}) * 50, s_c = at::ones({9}), i_c = at::ones({9});
  at::Tensor h_g = h_c.to(at::kCUDA), s_g = s_c.to(at::kCUDA), i_g = i_c.to(at::kCUDA);
  for (int step = 0; step < 20; ++step) {
    delayed_scaling_update(h_c, s_c, i_c, Fp8Type::kE4M3, 1, AmaxAlgo::kMax);
    delayed_scaling_update(h_g, s_g, i_g, Fp8Type::kE4M3, 1, AmaxAlgo::kMax);
    h_c.select(0, 0).copy_(at::rand({9}) * step);
    h_g.select(0, 0).copy_(h_c.select(0, 0));
  }
  EXPECT_TRUE(SameBits(h_g, h_c));
  EXPECT_TRUE(SameBits(s_g, s_c));
  EXPECT_TRUE(SameBits(i_g, i_c));
}

TEST(TorchApiGpu, RejectsCompanionTensorsOnAnotherDevice) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  const at::Tensor x = at::ones({8, 8}, at::TensorOptions().device(at::kCUDA));
  try {
    cast_transpose(x, at::ones({1}), at::zeros({1}, x.options()), at::zeros({1}, x.options()),
                   Fp8Type::kE4M3);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_NE(m.find("'scale'"), std::string::npos) << m;
    EXPECT_NE(m.find("same device"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fp8audit::kernels
