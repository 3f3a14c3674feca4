// The kernel probe's facets on the CPU, built against the stand-in types of cupti_types.h (as a
// build without CUPTI headers is; agent_kernel_probe_standin_test): the kernel classifier (pure),
// the CUPTI loader's failure path, attaching without CUPTI, and the probe driven through them.
#include "agent/src/kernel_probe.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "agent/src/cupti_loader.h"
#include "agent/src/kernel_classifier.h"
#include "agent/src/thread_state.h"

namespace fp8audit::agent {
namespace {

constexpr char kBulkSymbol[] =
    "_ZN18transformer_engine22delayed_scaling_recipe26amax_and_scale_update_impl11kernel_bulkEPf"
    "10AmaxParamsm15AmaxComputeAlgof";
constexpr char kBulkName[] =
    "transformer_engine::delayed_scaling_recipe::amax_and_scale_update_impl::kernel_bulk(float*, "
    "AmaxParams, unsigned long, AmaxComputeAlgo, float)";

TEST(KernelClassifier, TransformerEnginesBulkUpdateIsAChunkedUpdateWithItsScaledMaxParameter) {
  const Classifier rules;
  FunctionInfo fn;
  KernelClassifier(&rules).Classify(kBulkSymbol, &fn);
  EXPECT_EQ(fn.name, kBulkName);
  EXPECT_NE(fn.event, RuleEvent::kNone);
  EXPECT_TRUE(fn.chunked);
  EXPECT_EQ(fn.scaled_max_param, 4);
}

TEST(KernelClassifier, AnOtherKernelOrAnUnnamedOneIsNoUpdate) {
  const Classifier rules;
  FunctionInfo other, unnamed;
  KernelClassifier(&rules).Classify("void at::native::elementwise_kernel<128, 4>(int, float)",
                                    &other);
  KernelClassifier(&rules).Classify(nullptr, &unnamed);
  EXPECT_EQ(other.event, RuleEvent::kNone);
  EXPECT_EQ(unnamed.name, "<unnamed kernel>");
  EXPECT_EQ(unnamed.event, RuleEvent::kNone);
  EXPECT_EQ(unnamed.scaled_max_param, -1);
}

TEST(KernelClassifier, AUserRuleMatchesFirstAndAScaledMaxParameterThatIsNoFloatIsNotRead) {
  std::vector<PatternRule> user(1);
  user[0].event = RuleEvent::kUpdateForward;
  user[0].pattern = "kernel_bulk";
  user[0].scaled_max_param = 2;  // `unsigned long` in kernel_bulk's signature
  const Classifier rules(std::move(user));
  FunctionInfo fn;
  KernelClassifier(&rules).Classify(kBulkName, &fn);
  EXPECT_EQ(fn.event, RuleEvent::kUpdateForward);
  EXPECT_FALSE(fn.chunked);
  EXPECT_EQ(fn.scaled_max_param, -1);
}

TEST(KernelClassifier, OnlyTheTwoChunkSizesOfTransformerEngineAreFullChunks) {
  EXPECT_TRUE(KernelClassifier::IsFullUpdateChunk(1364));
  EXPECT_TRUE(KernelClassifier::IsFullUpdateChunk(169));
  for (unsigned grid : {0u, 1u, 36u, 168u, 170u, 1363u, 1365u}) {
    EXPECT_FALSE(KernelClassifier::IsFullUpdateChunk(grid)) << grid;
  }
}

// `why` is one line that starts with `starts` and names `names`; nothing was bound.
void ExpectSteppedAside(const CuptiLoader& loader, const std::string& why, std::string_view starts,
                        std::string_view names) {
  EXPECT_EQ(why.rfind(starts, 0), 0u) << why;
  EXPECT_NE(why.find(names), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_EQ(loader.driver().func_get_name, nullptr);
  EXPECT_EQ(loader.cupti().subscribe, nullptr);
  EXPECT_EQ(loader.cupti_path(), "");
}

TEST(CuptiLoader, AMissingDriverIsOneLineAndLeavesTheTablesEmpty) {
  CuptiLoader loader;
  std::string why;
  CuptiLoader::Libraries libraries;
  libraries.driver = "libfp8audit-no-such-driver.so.1";
  EXPECT_FALSE(loader.Load(libraries, /*from_driver=*/true, &why));
  ExpectSteppedAside(loader, why, "no CUDA driver (", "libfp8audit-no-such-driver.so.1");
}

TEST(CuptiLoader, AMissingCuptiIsOneLineNamingWhatWasTried) {
  CuptiLoader loader;
  std::string why;
  CuptiLoader::Libraries libraries;
  libraries.driver = "libc.so.6";  // loaded in every process; it has no cu* functions
  libraries.cupti = {"libfp8audit-no-such-cupti.so"};
  EXPECT_FALSE(loader.Load(libraries, /*from_driver=*/false, &why));
  ExpectSteppedAside(loader, why, "no CUPTI could be loaded (",
                     "tried 1: libfp8audit-no-such-cupti.so");
}

TEST(KernelProbeWithoutCupti, AttachingStepsAsideWithOneLine) {
  std::string why;
  EXPECT_EQ(AttachKernelProbe(KernelProbeHost{}, false, &why), AttachResult::kUnavailable);
  EXPECT_EQ(why, "this agent was built without CUPTI");
  EXPECT_EQ(SetLaunchProbe(true), -1);
  EXPECT_FALSE(DetachKernelProbe());
}

// Keeps the updates the probe records on one thread.
class CountingSink : public RecordSink {
 public:
  ThreadState* Self() override { return &thread_; }
  void Record(ThreadState*, RawEvent* e) override { kinds.push_back(e->kind); }
  void OnActivity(ThreadState*, const char*) override {}
  void CountLaunches(uint64_t n) override { launches += n; }
  void EnsureTrace() override {}

  std::vector<RawKind> kinds;
  uint64_t launches = 0;

 private:
  ThreadState thread_;
};

CUresult NameOf(const char** name, CUfunction f) {
  *name = reinterpret_cast<uintptr_t>(f) == 0x10 ? kBulkSymbol : "_Z5otherv";
  return CUDA_SUCCESS;
}

TEST(KernelProbe, ALaunchOfAnUpdateKernelIsRecordedAndEveryLaunchCounted) {
  CountingSink sink;
  const Classifier rules;
  DriverApi driver;
  driver.func_get_name = &NameOf;
  KernelProbe probe(&sink, &rules, driver);
  for (uintptr_t fn : {0x10, 0x20}) {
    cuLaunchKernel_params p{};
    p.f = reinterpret_cast<CUfunction>(fn);
    p.gridDimX = 3;
    CUresult ok = CUDA_SUCCESS;
    CUpti_CallbackData cb{};
    cb.callbackSite = CUPTI_API_EXIT;
    cb.functionParams = &p;
    cb.functionReturnValue = &ok;
    probe.OnCallback(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &cb);
  }
  EXPECT_EQ(sink.launches, 2u);
  EXPECT_EQ(sink.kinds, std::vector<RawKind>{RawKind::kKernelUpdate});
}

}  // namespace
}  // namespace fp8audit::agent
