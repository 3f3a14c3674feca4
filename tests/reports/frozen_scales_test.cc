// Microbatches in which one direction updated and the other did not (its scales froze), and traces
// in which no backward pass was observed at all: the auditor's verdict and the trace set's outcome.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "reports/auditor.h"
#include "reports/trace_set.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;
using reports::Expectation;
using reports::Outcome;
using reports::TraceSetOptions;
using testing::Contains;
using testing::TraceBuilder;

std::string AllExplanations(const v1::MicrobatchResult& row) {
  std::string all;
  for (const std::string& e : row.explanations()) all += e + "\n";
  return all;
}

// A marked microbatch with `forward` forward updates and no backward activity at all.
TraceBuilder& ForwardOnly(TraceBuilder& t, int forward = 1) {
  t.Begin();
  for (int i = 0; i < forward; ++i) t.Forward();
  return t.End();
}

TEST(FrozenScales, AForwardUpdateWithoutABackwardOneFailsTheMicrobatchBackwardScalesFroze) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  ForwardOnly(t);
  t.MarkedMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  const v1::MicrobatchResult& row = r.microbatches(1);
  EXPECT_EQ(row.expected_backward(), 1u);
  EXPECT_EQ(row.verdict(), v1::FAIL);
  EXPECT_TRUE(Contains(AllExplanations(row),
                       "no backward update in this microbatch: backward scales froze (harmful"))
      << AllExplanations(row);
  EXPECT_FALSE(Contains(AllExplanations(row), "judged as forward-only")) << AllExplanations(row);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::BACKWARD_COUNT);
  EXPECT_EQ(r.violations(0).message(),
            "microbatch 1 (step 0): 0 backward updates, expected 1: backward scales froze");
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_FALSE(r.no_backward_observed());
  EXPECT_EQ(r.confirmed_violations(), 1u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(2).verdict(), v1::PASS);
}

TEST(FrozenScales, ABackwardUpdateWithoutAForwardOneFailsForwardScalesFroze) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  t.Begin().BackwardBegin().Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::FAIL);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(1)),
                       "no forward update in this microbatch: forward scales froze"))
      << AllExplanations(r.microbatches(1));
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).message(),
            "microbatch 1 (step 0): 0 forward updates, expected 1: forward scales froze");
}

TEST(FrozenScales, WithoutMarkersAForwardOnlySegmentAfterTrainingFails) {
  // Pass boundaries: a training microbatch, then forward updates with no backward activity.
  TraceBuilder t;
  t.PlainMicrobatch().Autocast(true, 1).Forward().Autocast(false, 0).Forward().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  for (int i : {1, 2}) {
    EXPECT_EQ(r.microbatches(i).expected_backward(), 1u);
    EXPECT_EQ(r.microbatches(i).verdict(), v1::FAIL);
    EXPECT_TRUE(Contains(AllExplanations(r.microbatches(i)), "backward scales froze"));
  }
  EXPECT_FALSE(r.no_backward_observed());
  EXPECT_EQ(r.confirmed_violations(), 2u);
}

TEST(FrozenScales, NoBackwardPassAnywhereIsSaidAndTheFailuresAreNotConfirmed) {
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 3; ++i) ForwardOnly(t);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.verdict(), v1::FAIL);
    EXPECT_TRUE(Contains(AllExplanations(row),
                         "backward scales froze (harmful: the backward amax history and scales "
                         "kept their last update's values while the forward ones advanced); no "
                         "backward pass has been observed in this trace so far"))
        << AllExplanations(row);
  }
  EXPECT_TRUE(r.no_backward_observed());
  EXPECT_EQ(r.confirmed_violations(), 0u);
  // A job meant to have no backward pass says so: a pass.
  const v1::RankReport inference = t.Audit(Expectation{1, 0});
  EXPECT_EQ(inference.verdict(), v1::PASS);
  EXPECT_FALSE(inference.no_backward_observed());
}

TEST(FrozenScales, AForwardExcessInATraceWithoutBackwardIsConfirmed) {
  TraceBuilder t(-1, 1000, "nvtx");
  ForwardOnly(t);
  ForwardOnly(t, 2);
  t.Footer();
  const v1::RankReport r = t.Audit();
  EXPECT_TRUE(r.no_backward_observed());
  EXPECT_EQ(r.confirmed_violations(), 1u);  // the forward count of microbatch 1
}

TEST(FrozenScales, AMicrobatchWithoutAnyUpdateOrBackwardIsStillForwardOnly) {
  TraceBuilder t;
  t.PlainMicrobatch().Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).expected_backward(), 0u);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(1)), "judged as forward-only"));
  EXPECT_FALSE(Contains(AllExplanations(r.microbatches(1)), "froze"));
}

class FrozenScalesTraceSet : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const TraceBuilder& t) {
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(t.Write(p));
    return p;
  }
  testutil::TempDir tmp_{"fp8audit-frozen-"};
  const fs::path dir_{tmp_.path()};
};

TEST_F(FrozenScalesTraceSet, NoBackwardPassObservedIsIncompleteWithOneLineNotAPass) {
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 4; ++i) ForwardOnly(t);
  t.Footer();
  const std::string path = Write("a.fp8trace", t);
  const reports::TraceSetResult result = reports::AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kIncomplete);
  ASSERT_EQ(result.problems.size(), 1u);
  EXPECT_TRUE(Contains(result.problems[0], path + ": no backward pass was observed"))
      << result.problems[0];
  EXPECT_TRUE(Contains(result.problems[0], "--expect-backward 0")) << result.problems[0];
  EXPECT_EQ(result.report.outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  EXPECT_EQ(result.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  EXPECT_EQ(result.report.verdict(), v1::FAIL);

  TraceSetOptions none;
  none.expect_backward = 0;
  EXPECT_EQ(reports::AuditTraceFiles({path}, none).outcome, Outcome::kPass);
}

TEST_F(FrozenScalesTraceSet, AFrozenBackwardInATraceThatShowsBackwardIsAViolation) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  ForwardOnly(t);
  t.MarkedMicrobatch().Footer();
  const reports::TraceSetResult result =
      reports::AuditTraceFiles({Write("a.fp8trace", t)}, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kViolations);
  EXPECT_TRUE(result.problems.empty());
}

// fp8audit.te's safety net marks a microbatch whose backward update the fix lost: the microbatch
// fails with that explanation, and the trace is judged (FAIL), never "no backward pass observed".
TEST(FrozenScales, AnUpdateTheFixLostFailsItsMicrobatchAndTheTraceIsNotIncomplete) {
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 3; ++i) {
    t.Begin().Forward();  // a forward update, and no backward activity seen
    v1::Event* lost = t.Add(v1::FIX_LOST_UPDATE);
    lost->set_source(v1::PYTHON_HOOK);
    lost->set_pass(v1::BACKWARD);
    lost->set_detail("freed-frame");
    t.End();
  }
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    EXPECT_EQ(row.verdict(), v1::FAIL);
    EXPECT_EQ(row.expected_backward(), 1u);
    EXPECT_TRUE(Contains(AllExplanations(row), "the fix lost this update (harmful)"))
        << AllExplanations(row);
    EXPECT_TRUE(Contains(AllExplanations(row), "frame holding it was freed without its recompute"))
        << AllExplanations(row);
  }
  EXPECT_FALSE(r.no_backward_observed());
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_EQ(r.confirmed_violations(), 3u);
}

}  // namespace
}  // namespace fp8audit
