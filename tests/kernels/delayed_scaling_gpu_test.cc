// The DelayedScaling update kernel against the CPU reference, step after step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda_launch.h"
#include "kernels/fp8_format.h"
#include "kernels/reference.h"

namespace fp8audit::kernels::testing {
namespace {

// Current-step amaxes: mostly ordinary, sometimes 0, NaN, +-Inf, subnormal (scale overflows to
// FLT_MAX) or huge.
float DrawAmax(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 19);
  std::uniform_real_distribution<float> mag(-12.0f, 12.0f);
  switch (pick(rng)) {
    case 0:
      return 0.0f;
    case 1:
      return std::nanf("");
    case 2:
      return std::numeric_limits<float>::infinity();
    case 3:
      return bits_to_float(static_cast<uint32_t>(rng() % 0x7FFFFF + 1));  // subnormal
    case 4:
      return 3.0e38f;
    case 5:
      return -1.0f;
    default:
      return std::exp2(mag(rng));
  }
}

TEST(DelayedScalingGpu, MatchesReferenceOverManySteps) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  struct Config {
    int64_t history, tensors;
  };
  const Config configs[] = {{1, 7}, {16, 257}, {1024, 64}};
  std::mt19937 rng(77);
  for (const Config& c : configs) {
    for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
      for (AmaxAlgo algo : {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}) {
        for (int margin : {0, 2}) {
          std::vector<float> history(c.history * c.tensors, 0.0f);
          std::vector<float> scale(c.tensors, 1.0f), scale_inv(c.tensors, 1.0f);
          DeviceBuffer<float> d_history(history), d_scale(scale), d_scale_inv(scale_inv);
          for (int step = 0; step < 120; ++step) {
            for (int64_t t = 0; t < c.tensors; ++t) history[t] = DrawAmax(rng);
            FP8AUDIT_CUDA_CHECK(cudaMemcpy(d_history.get(), history.data(),
                                           c.tensors * sizeof(float), cudaMemcpyHostToDevice));
            FP8AUDIT_CUDA_CHECK(cuda::delayed_scaling_update(d_history.get(), c.history, c.tensors,
                                                             d_scale.get(), d_scale_inv.get(), f,
                                                             margin, algo, nullptr));
            ref::delayed_scaling_update(history.data(), c.history, c.tensors, scale.data(),
                                        scale_inv.data(), f, margin, algo);
            FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
            const auto gh = d_history.Download();
            const auto gs = d_scale.Download();
            const auto gi = d_scale_inv.Download();
            ASSERT_EQ(0, std::memcmp(gh.data(), history.data(), gh.size() * sizeof(float)))
                << "history differs at step " << step << " (H=" << c.history << ")";
            ASSERT_EQ(0, std::memcmp(gs.data(), scale.data(), gs.size() * sizeof(float)))
                << "scale differs at step " << step;
            ASSERT_EQ(0, std::memcmp(gi.data(), scale_inv.data(), gi.size() * sizeof(float)))
                << "scale_inv differs at step " << step;
          }
        }
      }
    }
  }
}

TEST(DelayedScalingGpu, LauncherRejectsInvalidArguments) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  DeviceBuffer<float> buf(16);
  EXPECT_EQ(cuda::delayed_scaling_update(buf.get(), 0, 4, buf.get(), buf.get(), Fp8Type::kE4M3, 0,
                                         AmaxAlgo::kMax, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::delayed_scaling_update(buf.get(), 2, 4, buf.get(), buf.get(), Fp8Type::kE4M3, 300,
                                         AmaxAlgo::kMax, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace fp8audit::kernels::testing
