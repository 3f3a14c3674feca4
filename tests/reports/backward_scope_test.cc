// TE PR #3456's quantization_backward_scope (reports/backward_scope.h): a rank whose outermost
// scope is never left fails with the rank and the place named; a job whose ranks did not all leave
// the scope in a microbatch fails with the ranks named and the remedy.
#include "reports/backward_scope.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reports/next_step.h"
#include "reports/render.h"
#include "reports/trace_set.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

// A rank of a job on a TE with PR #3456: `microbatches` marked microbatches of one update each
// way, their backward inside the scope where `scope`; `exits` extra scope entries and exits.
v1::RankReport Rank(int rank, int microbatches, bool scope, int extra = 0,
                    const std::string& semantics = "te-3456") {
  TraceBuilder t(rank, 5000 + rank, "nvtx");
  t.TeVersion("2.20.2", semantics);
  for (int i = 0; i < microbatches; ++i) {
    t.Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0);
    if (scope) t.Site("train.py:40 in step").Scope(true);
    t.BackwardBegin().Backward().BackwardEnd();
    if (scope) t.Scope(false);
    for (int k = 0; k < extra; ++k) t.Scope(true).Scope(false);
    t.End();
  }
  t.Footer();
  v1::RankReport r = t.Audit();
  r.set_path("traces/h." + std::to_string(5000 + rank) + ".rank" + std::to_string(rank) +
             ".fp8trace");
  return r;
}

std::vector<v1::Violation> OfKind(const v1::AuditReport& report, v1::Violation::Kind kind) {
  std::vector<v1::Violation> out;
  for (const v1::Violation& v : report.violations()) {
    if (v.kind() == kind) out.push_back(v);
  }
  for (const v1::RankReport& r : report.ranks()) {
    for (const v1::Violation& v : r.violations()) {
      if (v.kind() == kind) out.push_back(v);
    }
  }
  return out;
}

TEST(BackwardScope, EachMicrobatchCountsItsScopeExits) {
  const v1::RankReport r = Rank(0, 2, /*scope=*/true, /*extra=*/1);
  ASSERT_EQ(r.microbatches_size(), 2);
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    EXPECT_EQ(row.backward_scope_exits(), 2u);
    EXPECT_EQ(row.verdict(), v1::PASS);
  }
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_EQ(r.violations_size(), 0);
}

TEST(BackwardScope, BothRanksInsideTheScopePass) {
  const TraceSetResult job =
      AuditRankReports({Rank(0, 2, true), Rank(1, 2, true)}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kPass);
  EXPECT_EQ(job.report.violations_size(), 0);
}

TEST(BackwardScope, ARankThatSkipsTheScopeFailsTheJobWithTheRanksNamed) {
  const TraceSetResult job =
      AuditRankReports({Rank(0, 2, true), Rank(1, 2, false), Rank(2, 2, true)}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kViolations);
  EXPECT_EQ(job.report.verdict(), v1::FAIL);
  const auto scope = OfKind(job.report, v1::Violation::BACKWARD_SCOPE_RANKS);
  ASSERT_EQ(scope.size(), 1u);
  EXPECT_EQ(scope[0].rank(), -1);
  EXPECT_EQ(scope[0].microbatch(), 0u);
  EXPECT_EQ(scope[0].message(),
            "microbatches 0-1: quantization_backward_scope not entered and left on every rank: "
            "ranks 0, 2 did, rank 1 did not; " +
                std::string(kScopeRemedy));
  // The counts agree (one update each way everywhere): no other disagreement.
  EXPECT_TRUE(OfKind(job.report, v1::Violation::RANK_DISAGREEMENT).empty());
  EXPECT_EQ(job.report.next_step(), "next: " + std::string(kScopeRemedy));

  const std::string text = RenderText(job.report, RenderOptions{});
  EXPECT_TRUE(Contains(text,
                       "job violations:\n  microbatches 0-1: quantization_backward_scope not "
                       "entered and left on every rank: ranks 0, 2 did, rank 1 did not"))
      << text;
  EXPECT_TRUE(Contains(text, "[backward scope not on every rank]")) << text;
  std::string json, error;
  ASSERT_TRUE(Render(job.report, Format::kJson, RenderOptions{}, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"kind\": \"BACKWARD_SCOPE_RANKS\"")) << json;
  EXPECT_TRUE(Contains(json, "\"backward_scope_exits\": 1")) << json;
}

TEST(BackwardScope, RanksThatLeftItDifferentTimesFail) {
  const TraceSetResult job =
      AuditRankReports({Rank(0, 1, true), Rank(1, 1, true, 1)}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kViolations);
  const auto scope = OfKind(job.report, v1::Violation::BACKWARD_SCOPE_RANKS);
  ASSERT_EQ(scope.size(), 1u);
  EXPECT_EQ(scope[0].message(),
            "microbatch 0: ranks left quantization_backward_scope a different number of times "
            "(rank 0: 1, rank 1: 2); " +
                std::string(kScopeRemedy));
}

// A TE without the PR: no scope marks, no semantics; nothing to compare, the job as before.
TEST(BackwardScope, WithoutThePrNothingIsCompared) {
  const TraceSetResult job =
      AuditRankReports({Rank(0, 2, false, 0, ""), Rank(1, 2, false, 0, "")}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kPass);
  EXPECT_EQ(job.report.violations_size(), 0);
}

TEST(BackwardScope, AScopeNeverLeftFailsItsRankWithThePlaceNamed) {
  TraceBuilder t(1, 5001, "nvtx");
  t.TeVersion("2.20.2", "te-3456");
  t.MarkedMicrobatch();
  t.Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0);
  t.Site("train.py:40 in step").Scope(true).BackwardBegin().Backward().BackwardEnd().End();
  t.Footer();
  const v1::RankReport r = t.Audit();
  EXPECT_EQ(r.verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 1);
  const v1::Violation& v = r.violations(0);
  EXPECT_EQ(v.kind(), v1::Violation::BACKWARD_SCOPE_OPEN);
  EXPECT_EQ(v.rank(), 1);
  EXPECT_EQ(v.microbatch(), 1u);
  EXPECT_EQ(v.message(),
            "rank 1: quantization_backward_scope entered in microbatch 1 at train.py:40 in step "
            "was never left by the end of the trace: its backward update never ran there and this "
            "rank stops joining the amax all-reduce its peers still issue (a hang, or collectives "
            "paired wrongly); " +
                std::string(kScopeRemedy));
  EXPECT_EQ(r.confirmed_violations(), 1u);
  const TraceSetResult job = AuditRankReports({r}, TraceSetOptions{});
  EXPECT_EQ(job.outcome, Outcome::kViolations);
  EXPECT_EQ(job.report.next_step(), "next: " + std::string(kScopeRemedy));
  const std::string text = RenderText(job.report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "[backward scope left open]")) << text;
}

// TE's update never ran in the open scope: that microbatch's count fails too, and on TE's own
// scheduling the one step is the scope's (the fix's step would name the scope again).
TEST(BackwardScope, AnOpenScopeWithItsUpdateMissingGivesTheScopesStepAlone) {
  TraceBuilder t(0, 5000, "nvtx");
  t.TeVersion("2.20.2", "te-3456");
  t.Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0);
  t.Scope(true).BackwardBegin().BackwardEnd().End().Footer();
  const TraceSetResult job = AuditRankReports({t.Audit()}, TraceSetOptions{});
  ASSERT_EQ(job.outcome, Outcome::kViolations);
  ASSERT_EQ(job.report.ranks(0).recording().semantics_from(), "scheduling");
  EXPECT_EQ(OfKind(job.report, v1::Violation::BACKWARD_COUNT).size(), 1u);
  EXPECT_EQ(OfKind(job.report, v1::Violation::BACKWARD_SCOPE_OPEN).size(), 1u);
  EXPECT_EQ(job.report.next_step(), "next: " + std::string(kScopeRemedy));
}

TEST(BackwardScope, AScopeLeftAgainIsNotOpen) {
  OpenScope scope;
  v1::Event enter, exit;
  enter.set_kind(v1::BACKWARD_SCOPE);
  enter.set_context("enter");
  exit.set_kind(v1::BACKWARD_SCOPE);
  exit.set_context("exit");
  EXPECT_FALSE(scope.OpenViolation(0, true).has_value());
  scope.On(enter, 3, "a.py:1 in f");
  scope.On(enter, 4, "b.py:2 in g");  // a second entry keeps the first place
  ASSERT_TRUE(scope.OpenViolation(0, false).has_value());
  EXPECT_TRUE(Contains(scope.OpenViolation(0, false)->message(),
                       "entered in microbatch 3 at a.py:1 in f was still open when the trace "
                       "ended (the process ended inside it)"));
  scope.On(exit, 5, "");
  EXPECT_FALSE(scope.OpenViolation(0, true).has_value());
  EXPECT_TRUE(IsScopeExit(exit));
  EXPECT_FALSE(IsScopeExit(enter));
}

}  // namespace
}  // namespace fp8audit::reports
