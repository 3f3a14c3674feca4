// In the spirit of the missing-fence bug: many microbatches of cast-transpose feeding FP8 GEMMs
// on another stream, with checkpoint-style recomputation in the backward pass and DelayedScaling
// updates between steps. Every microbatch, each output is compared with a reference
// recomputation (CPU quantization, the same GEMM on the reference bytes), bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test_kernels.h"
#include "gpu_test_util.h"
#include "kernels/cuda_launch.h"
#include "kernels/fp8_format.h"
#include "kernels/reference.h"

namespace fp8audit::kernels::testing {
namespace {

constexpr int kTokens = 1024;  // M
constexpr int kIn = 1024;      // K
constexpr int kOut = 768;      // N
constexpr int kSteps = 4;
constexpr int kMicrobatches = 16;
constexpr int kHistory = 8;

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(rng));
  return v;
}

// One quantized operand: rowwise and columnwise codes plus its scale_inv, on the device.
struct Quantized {
  DeviceBuffer<uint8_t> rowwise, columnwise;
  DeviceBuffer<float> scale_inv;
  Quantized(size_t n) : rowwise(n), columnwise(n), scale_inv(1) {}
};

// The CPU mirror of the same operand.
struct HostQuantized {
  std::vector<uint8_t> rowwise, columnwise;
  float scale_inv = 0.0f;
};

HostQuantized CpuCastTranspose(const std::vector<uint16_t>& x, int rows, int cols, float scale,
                               Fp8Type f, float* amax) {
  HostQuantized q;
  q.rowwise.resize(x.size());
  q.columnwise.resize(x.size());
  ref::cast_transpose(x.data(), DType::kBFloat16, rows, cols, scale, f, q.rowwise.data(),
                      q.columnwise.data(), amax, &q.scale_inv);
  return q;
}

// The fp8 training-state mirror: amax history [kHistory, T], scale [T], scale_inv [T].
struct ScalingState {
  int tensors;
  Fp8Type format;
  std::vector<float> history, scale, scale_inv;
  DeviceBuffer<float> d_history, d_scale, d_scale_inv;
  ScalingState(int t, Fp8Type f)
      : tensors(t),
        format(f),
        history(kHistory * t, 0.0f),
        scale(t, 1.0f),
        scale_inv(t, 1.0f),
        d_history(history),
        d_scale(scale),
        d_scale_inv(scale_inv) {}
  float* amax_slot(int t) { return d_history.get() + t; }  // row 0: current step
  float* scale_ptr(int t) { return d_scale.get() + t; }
};

TEST(CastTransposeStress, MicrobatchesFeedingGemmsWithRecomputeMatchReference) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  cudaStream_t producer, consumer;
  FP8AUDIT_CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  FP8AUDIT_CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t ready;
  FP8AUDIT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));

  std::mt19937 rng(2024);
  // Forward state: tensors 0 = activation x, 1 = weight w (E4M3). Backward: 0 = dy (E5M2).
  ScalingState fwd(2, Fp8Type::kE4M3), bwd(1, Fp8Type::kE5M2);
  const std::vector<uint16_t> w = RandomBf16(size_t{kOut} * kIn, rng, 0.05f);
  DeviceBuffer<uint16_t> d_w(w);
  DeviceBuffer<uint16_t> d_x(size_t{kTokens} * kIn), d_dy(size_t{kTokens} * kOut);
  Quantized wq(w.size()), xq(d_x.size()), xq_re(d_x.size()), dyq(d_dy.size());
  Quantized ref_w(w.size()), ref_x(d_x.size()), ref_dy(d_dy.size());
  DeviceBuffer<float> scratch_amax(1);
  scratch_amax.Fill(0);
  DeviceBuffer<float> y(size_t{kTokens} * kOut), y_ref(y.size());
  DeviceBuffer<float> dx(size_t{kTokens} * kIn), dx_ref(dx.size());
  DeviceBuffer<float> dw(size_t{kOut} * kIn), dw_ref(dw.size());

  auto upload_ref = [](Quantized& d, const HostQuantized& h) {
    d.rowwise.Upload(h.rowwise);
    d.columnwise.Upload(h.columnwise);
    d.scale_inv.Upload({h.scale_inv});
  };
  int mismatches = 0;
  auto expect_same = [&](const char* what, const auto& got, const auto& want, int step, int mb) {
    const int64_t i = FirstMismatch(got, want);
    if (i >= 0) {
      ++mismatches;
      ADD_FAILURE() << what << " differs at element " << i << ", step " << step << " microbatch "
                    << mb;
    }
  };

  for (int step = 0; step < kSteps; ++step) {
    // Weight cast once per step (its amax goes to the forward history, tensor 1).
    FP8AUDIT_CUDA_CHECK(cuda::cast_transpose(
        d_w.get(), DType::kBFloat16, kOut, kIn, fwd.scale_ptr(1), Fp8Type::kE4M3, wq.rowwise.get(),
        wq.columnwise.get(), fwd.amax_slot(1), wq.scale_inv.get(), producer));
    const HostQuantized w_host =
        CpuCastTranspose(w, kOut, kIn, fwd.scale[1], Fp8Type::kE4M3, &fwd.history[1]);
    upload_ref(ref_w, w_host);
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      const float spread = std::ldexp(1.0f, (step * kMicrobatches + mb) % 9 - 4);
      const std::vector<uint16_t> x = RandomBf16(d_x.size(), rng, spread);
      const std::vector<uint16_t> dy = RandomBf16(d_dy.size(), rng, spread / 64);
      FP8AUDIT_CUDA_CHECK(
          cudaMemcpyAsync(d_x.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice, producer));
      FP8AUDIT_CUDA_CHECK(
          cudaMemcpyAsync(d_dy.get(), dy.data(), dy.size() * 2, cudaMemcpyHostToDevice, producer));
      // Forward: cast x, then the fprop GEMM on the consumer stream reads the fresh codes and
      // scale_inv right away.
      FP8AUDIT_CUDA_CHECK(cuda::cast_transpose(
          d_x.get(), DType::kBFloat16, kTokens, kIn, fwd.scale_ptr(0), Fp8Type::kE4M3,
          xq.rowwise.get(), xq.columnwise.get(), fwd.amax_slot(0), xq.scale_inv.get(), producer));
      FP8AUDIT_CUDA_CHECK(cudaEventRecord(ready, producer));
      FP8AUDIT_CUDA_CHECK(cudaStreamWaitEvent(consumer, ready, 0));
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(xq.rowwise.get(), Fp8Type::kE4M3, xq.scale_inv.get(),
                                    wq.rowwise.get(), Fp8Type::kE4M3, wq.scale_inv.get(), kTokens,
                                    kOut, kIn, y.get(), consumer));
      // Backward with activation recomputation: cast x again (amax to scratch, as a recompute
      // must not update the state twice), cast dy, then dgrad and wgrad.
      FP8AUDIT_CUDA_CHECK(
          cuda::cast_transpose(d_x.get(), DType::kBFloat16, kTokens, kIn, fwd.scale_ptr(0),
                               Fp8Type::kE4M3, xq_re.rowwise.get(), xq_re.columnwise.get(),
                               scratch_amax.get(), xq_re.scale_inv.get(), producer));
      FP8AUDIT_CUDA_CHECK(cuda::cast_transpose(d_dy.get(), DType::kBFloat16, kTokens, kOut,
                                               bwd.scale_ptr(0), Fp8Type::kE5M2, dyq.rowwise.get(),
                                               dyq.columnwise.get(), bwd.amax_slot(0),
                                               dyq.scale_inv.get(), producer));
      FP8AUDIT_CUDA_CHECK(cudaEventRecord(ready, producer));
      FP8AUDIT_CUDA_CHECK(cudaStreamWaitEvent(consumer, ready, 0));
      // dx[M, K] = dy[M, N] . w[N, K]: NT with b = w columnwise [K, N].
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(dyq.rowwise.get(), Fp8Type::kE5M2, dyq.scale_inv.get(),
                                    wq.columnwise.get(), Fp8Type::kE4M3, wq.scale_inv.get(),
                                    kTokens, kIn, kOut, dx.get(), consumer));
      // dw[N, K] = dy^T[N, M] . x[M, K]: NT with a = dy columnwise, b = recomputed x columnwise.
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(dyq.columnwise.get(), Fp8Type::kE5M2, dyq.scale_inv.get(),
                                    xq_re.columnwise.get(), Fp8Type::kE4M3, xq_re.scale_inv.get(),
                                    kOut, kIn, kTokens, dw.get(), consumer));

      // Reference recomputation of this microbatch.
      const HostQuantized x_host =
          CpuCastTranspose(x, kTokens, kIn, fwd.scale[0], Fp8Type::kE4M3, &fwd.history[0]);
      const HostQuantized dy_host =
          CpuCastTranspose(dy, kTokens, kOut, bwd.scale[0], Fp8Type::kE5M2, &bwd.history[0]);
      FP8AUDIT_CUDA_CHECK(cudaStreamSynchronize(consumer));
      FP8AUDIT_CUDA_CHECK(cudaStreamSynchronize(producer));
      upload_ref(ref_x, x_host);
      upload_ref(ref_dy, dy_host);
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(ref_x.rowwise.get(), Fp8Type::kE4M3, ref_x.scale_inv.get(),
                                    ref_w.rowwise.get(), Fp8Type::kE4M3, ref_w.scale_inv.get(),
                                    kTokens, kOut, kIn, y_ref.get(), nullptr));
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(ref_dy.rowwise.get(), Fp8Type::kE5M2, ref_dy.scale_inv.get(),
                                    ref_w.columnwise.get(), Fp8Type::kE4M3, ref_w.scale_inv.get(),
                                    kTokens, kIn, kOut, dx_ref.get(), nullptr));
      FP8AUDIT_CUDA_CHECK(GemmFp8NT(ref_dy.columnwise.get(), Fp8Type::kE5M2, ref_dy.scale_inv.get(),
                                    ref_x.columnwise.get(), Fp8Type::kE4M3, ref_x.scale_inv.get(),
                                    kOut, kIn, kTokens, dw_ref.get(), nullptr));
      FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
      expect_same("x rowwise", xq.rowwise.Download(), x_host.rowwise, step, mb);
      expect_same("x columnwise", xq.columnwise.Download(), x_host.columnwise, step, mb);
      expect_same("recomputed x rowwise", xq_re.rowwise.Download(), x_host.rowwise, step, mb);
      expect_same("recomputed x columnwise", xq_re.columnwise.Download(), x_host.columnwise, step,
                  mb);
      expect_same("dy columnwise", dyq.columnwise.Download(), dy_host.columnwise, step, mb);
      expect_same("fprop output", y.Download(), y_ref.Download(), step, mb);
      expect_same("dgrad output", dx.Download(), dx_ref.Download(), step, mb);
      expect_same("wgrad output", dw.Download(), dw_ref.Download(), step, mb);
      expect_same("forward amax history", fwd.d_history.Download(), fwd.history, step, mb);
      expect_same("backward amax history", bwd.d_history.Download(), bwd.history, step, mb);
      ASSERT_LE(mismatches, 10) << "stopping after repeated mismatches";
    }
    // End of step: DelayedScaling update of both states, on the device and in the mirror.
    FP8AUDIT_CUDA_CHECK(cuda::delayed_scaling_update(fwd.d_history.get(), kHistory, fwd.tensors,
                                                     fwd.d_scale.get(), fwd.d_scale_inv.get(),
                                                     fwd.format, 0, AmaxAlgo::kMax, producer));
    FP8AUDIT_CUDA_CHECK(cuda::delayed_scaling_update(bwd.d_history.get(), kHistory, bwd.tensors,
                                                     bwd.d_scale.get(), bwd.d_scale_inv.get(),
                                                     bwd.format, 1, AmaxAlgo::kMax, producer));
    ref::delayed_scaling_update(fwd.history.data(), kHistory, fwd.tensors, fwd.scale.data(),
                                fwd.scale_inv.data(), fwd.format, 0, AmaxAlgo::kMax);
    ref::delayed_scaling_update(bwd.history.data(), kHistory, bwd.tensors, bwd.scale.data(),
                                bwd.scale_inv.data(), bwd.format, 1, AmaxAlgo::kMax);
    FP8AUDIT_CUDA_CHECK(cudaStreamSynchronize(producer));
    expect_same("forward scale", fwd.d_scale.Download(), fwd.scale, step, -1);
    expect_same("backward scale", bwd.d_scale.Download(), bwd.scale, step, -1);
    expect_same("forward scale_inv", fwd.d_scale_inv.Download(), fwd.scale_inv, step, -1);
    EXPECT_NE(fwd.scale[0], 1.0f) << "the scales should evolve";
  }
  EXPECT_EQ(mismatches, 0);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

}  // namespace
}  // namespace fp8audit::kernels::testing
