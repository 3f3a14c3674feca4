// reports/baseline.h: one run against a baseline, per rank and microbatch.
#include "reports/baseline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fp8audit::reports {
namespace {

// A report of one trace of `rank` whose microbatches make `counts` (forward, backward), 1/1
// expected.
v1::AuditReport Report(int32_t rank, const std::vector<std::pair<uint32_t, uint32_t>>& counts) {
  v1::AuditReport report;
  v1::RankReport* r = report.add_ranks();
  r->set_rank(rank);
  uint32_t i = 0;
  for (const auto& [f, b] : counts) {
    v1::MicrobatchResult* m = r->add_microbatches();
    m->set_index(i++);
    m->set_forward_updates(f);
    m->set_backward_updates(b);
    m->set_expected_forward(1);
    m->set_expected_backward(1);
    m->set_verdict(f == 1 && b == 1 ? v1::PASS : v1::FAIL);
  }
  return report;
}

TEST(Baseline, FewerExtraUpdatesAreBetterAndConsecutiveSameChangesAreOneRange) {
  const auto before = Report(0, {{3, 8}, {3, 9}, {3, 9}, {1, 1}});
  const auto after = Report(0, {{1, 1}, {1, 1}, {1, 1}, {1, 1}});
  const BaselineComparison c = CompareWithBaseline(before, after);
  EXPECT_EQ(c.better, 3u);
  EXPECT_EQ(c.worse, 0u);
  EXPECT_EQ(c.unchanged, 1u);
  EXPECT_EQ(c.failing, 0u);
  EXPECT_EQ(c.base_failing, 3u);
  EXPECT_FALSE(c.worse_overall);
  ASSERT_EQ(c.changes.size(), 2u);
  EXPECT_EQ(c.changes[1].first, 1u);
  EXPECT_EQ(c.changes[1].last, 2u);
  const std::string text = RenderBaselineText(before, after, c, 0);
  EXPECT_NE(text.find("     0           0       3/8       1/1       1/1  better\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("     0         1-2       3/9       1/1       1/1  better\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("microbatches: 3 better, 0 worse, 1 as before; failing: 0 (baseline 3)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("not worse than the baseline"), std::string::npos) << text;
}

TEST(Baseline, OneMicrobatchFurtherFromTheExpectedMakesTheRunWorse) {
  const auto before = Report(0, {{2, 1}, {2, 1}});
  const auto after = Report(0, {{1, 1}, {3, 1}});
  const BaselineComparison c = CompareWithBaseline(before, after);
  EXPECT_EQ(c.better, 1u);
  EXPECT_EQ(c.worse, 1u);
  EXPECT_TRUE(c.worse_overall);
  EXPECT_NE(RenderBaselineText(before, after, c, 0).find("WORSE than the baseline"),
            std::string::npos);
}

TEST(Baseline, RanksAreMatchedByRankAndMissingMicrobatchesAreCounted) {
  auto before = Report(1, {{1, 1}, {1, 1}, {1, 1}});
  auto after = Report(0, {{2, 1}});
  *after.add_ranks() = Report(1, {{1, 1}, {1, 1}}).ranks(0);
  const BaselineComparison c = CompareWithBaseline(before, after);
  EXPECT_EQ(c.only_here, 1u);      // rank 0's microbatch
  EXPECT_EQ(c.only_baseline, 1u);  // rank 1's third
  EXPECT_EQ(c.unchanged, 2u);
  EXPECT_TRUE(c.worse_overall);  // one more failing microbatch
}

TEST(Baseline, AFoldedRangeStandsForEachOfItsMicrobatches) {
  auto before = Report(0, {{2, 1}});
  before.mutable_ranks(0)->mutable_microbatches(0)->set_through_index(4);  // 0-4 alike
  const auto after = Report(0, {{1, 1}, {1, 1}, {1, 1}, {1, 1}, {2, 1}});
  const BaselineComparison c = CompareWithBaseline(before, after);
  EXPECT_EQ(c.better, 4u);
  EXPECT_EQ(c.unchanged, 1u);
  EXPECT_FALSE(c.worse_overall);
}

}  // namespace
}  // namespace fp8audit::reports
