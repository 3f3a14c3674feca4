// The auditor's bounds: rows kept and folded, capped detail, saturated counts, bounded state.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reports/auditor.h"
#include "tests/reports/auditor_test_util.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::AllExplanations;
using testing::Contains;
using testing::TraceBuilder;

TEST(Auditor, MaxRowsKeepsEveryRowUntilExceededThenOnlyFailingOnes) {
  TraceBuilder small(-1, 1000, "nvtx");
  for (int i = 0; i < 5; ++i) small.MarkedMicrobatch();
  AuditorOptions options;
  options.max_rows = 5;
  {
    Auditor a(options);
    small.Feed(&a);
    EXPECT_EQ(a.report().microbatches_size(), 5);
  }
  TraceBuilder big(-1, 1000, "nvtx");
  for (int i = 0; i < 1000; ++i) big.MarkedMicrobatch(1, i % 100 == 7 ? 2 : 1);
  big.Footer();
  Auditor a(options);
  big.Feed(&a);
  const v1::RankReport& r = a.report();
  EXPECT_EQ(r.totals().microbatches(), 1000u);
  EXPECT_EQ(r.totals().failing_microbatches(), 10u);
  ASSERT_EQ(r.microbatches_size(), 5);
  for (const auto& row : r.microbatches()) EXPECT_EQ(row.verdict(), v1::FAIL);
  EXPECT_EQ(r.microbatches(0).index(), 7u);
}

// Beyond max_rows, a failing row identical to the last kept one and right after it extends that
// row (through_index, through_step) instead of being dropped; a different one is dropped.
TEST(Auditor, RowsBeyondMaxRowsThatContinueTheLastKeptRowAreFoldedIntoIt) {
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 300; ++i) t.MarkedMicrobatch(4, 3);
  t.MarkedMicrobatch(2, 1);                               // different: not folded, and no room left
  for (int i = 0; i < 10; ++i) t.MarkedMicrobatch(4, 3);  // not right after the last kept row
  t.Footer();
  AuditorOptions options;
  options.max_rows = 5;
  Auditor a(options);
  t.Feed(&a);
  const v1::RankReport& r = a.report();
  EXPECT_EQ(r.totals().failing_microbatches(), 311u);
  ASSERT_EQ(r.microbatches_size(), 5);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(r.microbatches(i).has_through_index()) << i;
  const v1::MicrobatchResult& last = r.microbatches(4);
  EXPECT_EQ(last.index(), 4u);
  EXPECT_EQ(last.through_index(), 299u);
  EXPECT_EQ(last.through_step(), 0u);
  EXPECT_EQ(last.forward_updates(), 4u);
}

// Every row kept (max_rows 0, as JSON and HTML ask): the first fold_beyond microbatches are a row
// each; past them a row identical to the one before extends it, so memory follows the distinct
// runs of rows, not the microbatches; a different row is kept, and so is every microbatch's count.
TEST(Auditor, PastFoldBeyondIdenticalRowsExtendTheRowBeforeAndDifferentOnesAreKept) {
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 6; ++i) t.MarkedMicrobatch(1, 1);
  t.MarkedMicrobatch(2, 1);
  for (int i = 0; i < 3; ++i) t.MarkedMicrobatch(1, 1);
  t.Footer();
  AuditorOptions options;
  options.max_rows = 0;
  options.fold_beyond = 4;
  Auditor a(options);
  t.Feed(&a);
  const v1::RankReport& r = a.report();
  EXPECT_EQ(r.totals().microbatches(), 10u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  ASSERT_EQ(r.microbatches_size(), 6) << r.DebugString();  // 0, 1, 2, 3-5, 6, 7-9
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(r.microbatches(i).has_through_index()) << i;
  EXPECT_EQ(r.microbatches(3).index(), 3u);
  EXPECT_EQ(r.microbatches(3).through_index(), 5u);
  EXPECT_EQ(r.microbatches(4).index(), 6u);
  EXPECT_EQ(r.microbatches(4).verdict(), v1::FAIL);
  EXPECT_EQ(r.microbatches(5).index(), 7u);
  EXPECT_EQ(r.microbatches(5).through_index(), 9u);

  options.fold_beyond = 0;  // never: a row per microbatch
  Auditor every(options);
  t.Feed(&every);
  EXPECT_EQ(every.report().microbatches_size(), 10);
}

TEST(Auditor, DetailIsCappedButCountsAndVerdictsAreNot) {
  // Every backward update in its own recompute frame: 300 different places.
  TraceBuilder t(-1, 1000, "nvtx");
  for (int i = 0; i < 4; ++i) {
    t.Begin().Forward().BackwardBegin();
    for (uint64_t f = 1; f <= 300; ++f) t.CheckpointEnter(f, 2).Backward().CheckpointExit(f);
    t.BackwardEnd().End();
  }
  t.Footer();
  AuditorOptions options;
  options.max_detailed = 2;
  options.max_context_events = 10;
  options.max_explanations = 3;
  Auditor a(options);
  t.Feed(&a);
  const v1::RankReport& r = a.report();
  ASSERT_EQ(r.microbatches_size(), 4);
  EXPECT_EQ(r.microbatches(0).backward_updates(), 300u);
  EXPECT_LE(r.microbatches(0).updates_size(), 10);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)), "... and 296 more extra backward"))
      << AllExplanations(r.microbatches(0));
  EXPECT_LE(r.violations(0).context_size(), 11);
  EXPECT_EQ(r.microbatches(3).updates_size(), 0);  // beyond max_detailed
  EXPECT_EQ(r.violations(3).context_size(), 0);
  EXPECT_EQ(r.microbatches(3).verdict(), v1::FAIL);
  EXPECT_EQ(r.totals().failing_microbatches(), 4u);
}

TEST(Auditor, HugeCountsSaturateInsteadOfOverflowing) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward(~uint64_t{0}).Forward(~uint64_t{0}).End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).forward_updates(), ~uint32_t{0});
  EXPECT_EQ(r.totals().forward_updates(), ~uint64_t{0});
}

TEST(Auditor, StoredStringsAreBounded) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward();
  t.Add(v1::UPDATE_FORWARD)->set_detail(std::string(1 << 20, 'k'));
  t.End().Footer();
  const v1::RankReport r = t.Audit(Expectation{1, 0});  // the forward count's violation alone
  ASSERT_EQ(r.violations_size(), 1);
  for (const auto& e : r.violations(0).context()) EXPECT_LE(e.detail().size(), 512u);
  for (const auto& e : r.microbatches(0).explanations()) EXPECT_LE(e.size(), 1024u);
}

TEST(Auditor, CheckpointFramesLeftOpenStayBounded) {
  TraceBuilder t;
  for (uint64_t f = 1; f <= 10000; ++f) t.CheckpointEnter(f, 2);
  t.Forward().Forward().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).forward_updates(), 2u);
}

}  // namespace
}  // namespace fp8audit::reports
