// The hardware conversions the kernels use agree with the bit-level reference for every input.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <sstream>

#include "gpu_test_kernels.h"
#include "gpu_test_util.h"
#include "kernels/fp8_format.h"

namespace fp8audit::kernels::testing {
namespace {

MismatchReport RunComparison(const std::function<cudaError_t(MismatchReport*)>& launch) {
  DeviceBuffer<MismatchReport> report(1);
  report.Fill(0);
  FP8AUDIT_CUDA_CHECK(launch(report.get()));
  FP8AUDIT_CUDA_CHECK(cudaDeviceSynchronize());
  return report.Download()[0];
}

std::string Describe(const MismatchReport& r) {
  std::ostringstream out;
  out << r.count << " mismatches; first (input, hardware, reference):" << std::hex;
  for (unsigned long long i = 0; i < r.count && i < kMaxSamples; ++i) {
    out << " (0x" << r.samples[i][0] << ", 0x" << r.samples[i][1] << ", 0x" << r.samples[i][2]
        << ")";
  }
  return out.str();
}

TEST(Fp8FormatGpu, HardwareEncodeMatchesReferenceForEveryFloat) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
    const MismatchReport r = RunComparison([f](MismatchReport* report) {
      return CompareEncodeWithHardware(f, 0, 1ull << 32, report);
    });
    EXPECT_EQ(r.count, 0u) << (f == Fp8Type::kE4M3 ? "e4m3: " : "e5m2: ") << Describe(r);
  }
}

TEST(Fp8FormatGpu, HardwareDecodeMatchesReferenceForEveryCode) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  for (Fp8Type f : {Fp8Type::kE4M3, Fp8Type::kE5M2}) {
    const MismatchReport r =
        RunComparison([f](MismatchReport* report) { return CompareDecodeWithHardware(f, report); });
    EXPECT_EQ(r.count, 0u) << Describe(r);
  }
}

TEST(Fp8FormatGpu, HalfAndBf16ConversionsMatchHardwareForEveryNonNaN) {
  FP8AUDIT_SKIP_WITHOUT_GPU();
  for (int which : {0, 1}) {
    const MismatchReport r = RunComparison([which](MismatchReport* report) {
      return CompareNarrowingWithHardware(which, 0, 1ull << 32, report);
    });
    EXPECT_EQ(r.count, 0u) << (which == 0 ? "float->half: " : "float->bf16: ") << Describe(r);
  }
  const MismatchReport r =
      RunComparison([](MismatchReport* report) { return CompareHalfWideningWithHardware(report); });
  EXPECT_EQ(r.count, 0u) << "half->float: " << Describe(r);
}

}  // namespace
}  // namespace fp8audit::kernels::testing
