// The te-call probe with fake calls, the pass boundaries and the probe-choice rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/pass_tracker.h"
#include "agent/src/probe_control.h"
#include "agent/src/te_probe.h"
#include "agent/src/thread_state.h"
#include "tests/agent/probes_test_util.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

using testing::K;
using testing::TestSink;

// ---- te-call probe --------------------------------------------------------------------------

TEST(TeCallProbe, EachCallIsOneUpdateWithItsEntryTensorsAndDtype) {
  TestSink sink;
  int first = 0;
  TeCallProbe probe(&sink, [&] { ++first; });
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  ASSERT_TRUE(probe.Begin(1, 7, 12));
  EXPECT_EQ(main->ledger.te_call_depth, 1u);
  probe.End();
  EXPECT_EQ(main->ledger.te_call_depth, 0u);
  ASSERT_TRUE(probe.Begin(0, 8, 1));
  probe.End();
  EXPECT_FALSE(probe.Begin(2, 7, 1));  // not an entry point: nothing recorded
  EXPECT_EQ(first, 1);
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind, RawKind::kTeCall);
  EXPECT_EQ(sink.events[0].Tensors(), 12u);
  EXPECT_EQ(sink.events[0].scaled_max, ScaledMax::kE4M3);
  EXPECT_EQ(sink.events[0].fn->name,
            "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction");
  EXPECT_EQ(sink.events[1].scaled_max, ScaledMax::kE5M2);
  EXPECT_EQ(sink.events[1].fn->name, "nvte_delayed_scaling_recipe_amax_and_scale_update");
  EXPECT_EQ(main->ledger.counted_updates, 2u);
  const auto converted = sink.Converted();
  ASSERT_EQ(converted.size(), 2u);
  EXPECT_EQ(converted[0].kind(), v1::UPDATE_FORWARD);
  EXPECT_EQ(converted[0].source(), v1::TE_CALL);
  EXPECT_EQ(converted[0].tensors(), 12u);
  EXPECT_EQ(converted[1].kind(), v1::UPDATE_BACKWARD);  // E5M2: only gradients use it
}

TEST(TeCallProbe, DirectionsFollowTheDtypeThenThePassAndPassBoundariesAreRecorded) {
  TestSink sink;
  TeCallProbe probe(&sink);
  ThreadState* main = sink.Thread(1);
  ThreadState* autograd = sink.Thread(2, /*autograd=*/true);
  auto call = [&](ThreadState* ts, int dtype) {
    sink.Use(ts);
    ASSERT_TRUE(probe.Begin(1, dtype, 3));
    probe.End();
  };
  call(main, 7);      // forward update
  call(autograd, 7);  // E4M3 on an autograd thread: a recompute (HYBRID) or backward (E4M3)
  call(autograd, 4);  // an unknown dtype: the pass
  call(main, 7);
  // Auto format: no E5M2 was ever seen, so the held E4M3 update goes by its pass (E4M3-only).
  EXPECT_EQ(sink.Kinds(), (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_BACKWARD,
                             v1::UPDATE_BACKWARD, v1::BACKWARD_END, v1::UPDATE_FORWARD}));
  EXPECT_EQ(sink.Kinds(FormatHint::kHybrid),
            (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD,
               v1::BACKWARD_END, v1::UPDATE_FORWARD}));
  const auto converted = sink.Converted();
  EXPECT_EQ(converted[1].detail(), "TE update call on an autograd thread");
}

TEST(TeCallProbe, AThrownCallLeavesTheThreadInACallUntilItsNextCall) {
  TestSink sink;
  TeCallProbe probe(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  ASSERT_TRUE(probe.Begin(1, 7, 1));  // never reaches End
  EXPECT_EQ(main->ledger.te_call_depth, 1u);
  ASSERT_TRUE(probe.Begin(1, 7, 1));
  probe.End();
  EXPECT_EQ(main->ledger.te_call_depth, 0u);
}

// ---- pass boundaries and probe choice --------------------------------------------------------

TEST(PassTracker, TheFirstActiveThreadTrainsOthersFollowTheLastBoundary) {
  TestSink sink;
  ThreadState* main = sink.Thread(1);
  ThreadState* other = sink.Thread(3);
  ThreadState* autograd = sink.Thread(2, true);
  for (ThreadState* ts : {main, other, autograd}) sink.OnActivity(ts, "launch");
  EXPECT_EQ(main->role, Role::kTraining);
  EXPECT_EQ(other->role, Role::kOther);
  RawEvent e;
  sink.Record(other, &e);
  EXPECT_EQ(sink.events.back().pass, kPassBackward);  // after BACKWARD_BEGIN
  sink.OnActivity(main, "launch");
  sink.Record(other, &e);
  EXPECT_EQ(sink.events.back().pass, kPassForward);
  EXPECT_EQ(sink.Kinds(), (K{v1::BACKWARD_BEGIN, v1::STEP, v1::BACKWARD_END, v1::STEP}));
}

TEST(ProbeControl, CuptiIsSubscribedOnlyWhereTheModeAndTheJobAskForIt) {
  struct Case {
    ProbeMode mode;
    bool te_loaded, interposed, patterns;
    bool subscribe, provisional;
  };
  const Case cases[] = {
      {ProbeMode::kTeCall, false, true, true, false, false},
      {ProbeMode::kKernel, true, true, false, true, false},
      {ProbeMode::kAll, true, true, false, true, false},
      {ProbeMode::kAuto, true, true, false, false, false},  // a TE job: CUPTI left alone
      {ProbeMode::kAuto, false, true, false, true, true},   // no TE yet: until it loads
      {ProbeMode::kAuto, true, true, true, true, false},    // kernel patterns: kept
      {ProbeMode::kAuto, true, false, false, true, false},  // not preloaded: TE calls unseen
  };
  for (const Case& c : cases) {
    const CuptiPlan plan = PlanCuptiAtCudaInit(c.mode, c.te_loaded, c.interposed, c.patterns);
    EXPECT_EQ(plan.subscribe, c.subscribe) << ProbeModeName(c.mode) << c.te_loaded << c.patterns;
    EXPECT_EQ(plan.provisional, c.provisional) << ProbeModeName(c.mode) << c.te_loaded;
  }
  EXPECT_TRUE(IsTeLibrary("/site/transformer_engine/libtransformer_engine.so"));
  EXPECT_TRUE(IsTeLibrary("libtransformer_engine.so.2"));
  EXPECT_FALSE(IsTeLibrary("/site/transformer_engine_torch.cpython-312.so"));
  EXPECT_FALSE(IsTeLibrary("/lib/libtransformer_engine_notes.txt"));
  EXPECT_EQ(ProbeNames(ProbeBit(Probe::kTeCall) | ProbeBit(Probe::kKernel) |
                       ProbeBit(Probe::kPythonHook)),
            (std::vector<std::string>{"te-call", "kernel", "python-hook"}));
}

TEST(ProbeControl, AProbesEventNamesTheActiveProbes) {
  RawEvent raw;
  raw.kind = RawKind::kProbes;
  raw.count = ProbeBit(Probe::kTeCall) | ProbeBit(Probe::kPythonHook);
  raw.SetText("CUPTI released");
  EventConverter c(FormatHint::kAuto);
  std::vector<v1::Event> out;
  c.Push(raw, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind(), v1::PROBES);
  ASSERT_EQ(out[0].probes_size(), 2);
  EXPECT_EQ(out[0].probes(1), "python-hook");
  EXPECT_EQ(out[0].detail(), "CUPTI released");
}

}  // namespace
}  // namespace fp8audit::agent
