// Per-probe tallies of a microbatch's updates and their comparison, apart from the auditor.
#include "reports/probe_tally.h"

#include <gtest/gtest.h>

#include <limits>

namespace fp8audit {
namespace {

using reports::HookUnfused;
using reports::ProbeBit;
using reports::ProbeTallies;

constexpr int kFwd = 0;
constexpr int kBwd = 1;

TEST(ProbeTally, HookUnfusedReadsTheRangesCountAndNeverMoreThanTheUpdates) {
  EXPECT_EQ(HookUnfused("fp8audit.update amax unfused=2", 3), 2u);
  EXPECT_EQ(HookUnfused("fp8audit.update amax unfused=9", 3), 3u);
  EXPECT_EQ(HookUnfused("fp8audit.update amax", 3), 0u);
  EXPECT_EQ(HookUnfused("fp8audit.update amax unfused=x", 3), 0u);
}

TEST(ProbeTally, ProbeBitsAreOnePerAgentProbeAndNoneForOtherNames) {
  EXPECT_EQ(ProbeBit("cupti") | ProbeBit("te-call") | ProbeBit("python-hook"), 7u);
  EXPECT_NE(ProbeBit("cupti"), ProbeBit("te-call"));
  EXPECT_EQ(ProbeBit("nvtx"), 0u);
}

TEST(ProbeTally, ProbesThatSawDifferentCountsAreListedTeCallFirst) {
  ProbeTallies t;
  t.Count(v1::TE_CALL, kFwd, 1, "");
  t.Count(v1::KERNEL, kFwd, 2, "");
  const uint32_t both = ProbeBit("te-call") | ProbeBit("cupti");
  EXPECT_EQ(t.Disagreement(both, kFwd), "te-call 1, kernel 2");
  EXPECT_EQ(t.Disagreement(both, kBwd), "");               // neither saw a backward update
  EXPECT_EQ(t.Disagreement(ProbeBit("cupti"), kFwd), "");  // nothing to compare with
}

TEST(ProbeTally, CrossChecksCountForTheirProbeAndTheHooksUnfusedUpdatesDoNot) {
  ProbeTallies t;
  t.Count(v1::KERNEL, kBwd, 1, "");
  t.CrossCheck(v1::TE_CALL, kBwd, 1);
  t.Count(v1::PYTHON_HOOK, kBwd, 2, "amax unfused=1");
  const uint32_t all = ProbeBit("te-call") | ProbeBit("cupti") | ProbeBit("python-hook");
  EXPECT_EQ(t.unfused[kBwd], 1u);
  EXPECT_EQ(t.Disagreement(all, kBwd), "");
}

TEST(ProbeTally, WrittenTalliesNameOnlyTheSourcesThatSawSomething) {
  ProbeTallies t;
  EXPECT_FALSE(t.Any());
  t.Count(v1::PYTHON_HOOK, kFwd, 3, "unfused=2 x unfused=2");
  t.CrossCheck(v1::TE_CALL, kFwd, 1);
  ASSERT_TRUE(t.Any());
  v1::SourceTallies by;
  t.WriteTo(&by);
  EXPECT_FALSE(by.has_kernel());
  EXPECT_FALSE(by.has_other());
  EXPECT_EQ(by.python_hook().forward(), 3u);
  EXPECT_EQ(by.python_hook().unfused_forward(), 2u);
  EXPECT_EQ(by.te_call().forward(), 0u);
  EXPECT_EQ(by.te_call().crosscheck_forward(), 1u);
}

TEST(ProbeTally, AddedTalliesSumAndSaturate) {
  ProbeTallies a;
  ProbeTallies b;
  a.Count(v1::KERNEL, kFwd, std::numeric_limits<uint64_t>::max() - 1, "");
  b.Count(v1::KERNEL, kFwd, 5, "");
  b.Count(v1::RUNTIME, kBwd, 2, "");
  a.Add(b);
  EXPECT_EQ(a.counted_by[reports::kKernel][kFwd], std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(a.counted_by[reports::kOther][kBwd], 2u);
}

TEST(ProbeTally, ProbesNoLongerActiveAreListedAsReleasedOnce) {
  reports::ActiveProbes active;
  v1::Recording rec;
  google::protobuf::RepeatedPtrField<std::string> probes;
  *probes.Add() = "cupti";
  *probes.Add() = "te-call";
  *probes.Add() = "cupti";
  EXPECT_EQ(active.Set(probes, &rec), ProbeBit("cupti") | ProbeBit("te-call"));
  probes.RemoveLast();
  probes.RemoveLast();
  EXPECT_EQ(active.Set(probes, &rec), ProbeBit("cupti"));
  EXPECT_EQ(active.Set(probes, &rec), ProbeBit("cupti"));
  ASSERT_EQ(rec.probes_size(), 2);
  ASSERT_EQ(rec.released_size(), 1);
  EXPECT_EQ(rec.released(0), "te-call");
}

TEST(ProbeTally, AnOlderTracesCuptiIsListedAsTheKernelProbe) {
  EXPECT_EQ(ProbeBit("cupti"), ProbeBit("kernel"));
  reports::ActiveProbes active;
  v1::Recording rec;
  google::protobuf::RepeatedPtrField<std::string> probes;
  *probes.Add() = "cupti";
  *probes.Add() = "kernel";
  EXPECT_EQ(active.Set(probes, &rec), ProbeBit("kernel"));
  ASSERT_EQ(rec.probes_size(), 1);
  EXPECT_EQ(rec.probes(0), "kernel");
}

}  // namespace
}  // namespace fp8audit
