// The auditor's live hooks: on_update, on_microbatch_span, on_microbatch, on_violation, on_excess.
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

// What on_update hands a timeline: each update's number in its microbatch and direction, and
// for an extra one where it happened, in the explanations' words.
struct SeenUpdate {
  v1::Pass direction;
  uint32_t microbatch;
  uint64_t first, last, expected;
  std::string where;
};

TEST(Auditor, UpdateHookNumbersEachUpdateAndExplainsTheExtraOnes) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  t.Begin().Forward(3).BackwardBegin();
  const uint64_t th = TraceBuilder::kAutogradThread;
  t.CheckpointEnter(1, 2, v1::REENTRANT, th).Module(true, "fc1", th).Backward().Backward();
  t.CheckpointExit(1, th).BackwardEnd().End().Footer();
  Auditor auditor(Expectation{});
  std::vector<SeenUpdate> seen;
  auditor.on_update = [&](const CountedUpdate& u) {
    seen.push_back({u.direction, u.microbatch, u.first, u.last, u.expected, std::string(u.where)});
  };
  t.Feed(&auditor);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].microbatch, 0u);
  EXPECT_EQ(seen[0].where, "");
  // Microbatch 1: one launch of 3 forward updates (2 and 3 extra), then 2 backward (1 extra).
  EXPECT_EQ(seen[2].microbatch, 1u);
  EXPECT_EQ(seen[2].direction, v1::FORWARD);
  EXPECT_EQ(seen[2].first, 1u);
  EXPECT_EQ(seen[2].last, 3u);
  EXPECT_EQ(seen[2].expected, 1u);
  EXPECT_TRUE(Contains(seen[2].where, "outside any checkpoint")) << seen[2].where;
  EXPECT_EQ(seen[3].direction, v1::BACKWARD);
  EXPECT_EQ(seen[3].where, "");
  EXPECT_EQ(seen[4].first, 2u);
  EXPECT_EQ(seen[4].last, 2u);
  EXPECT_TRUE(Contains(seen[4].where, "during recompute of reentrant checkpoint frame 1"))
      << seen[4].where;
  EXPECT_TRUE(Contains(seen[4].where, "after module fc1 (thread 4343, kernel")) << seen[4].where;
  // The same words as the microbatch's explanations.
  EXPECT_TRUE(Contains(AllExplanations(auditor.report().microbatches(1)), seen[4].where));
}

TEST(Auditor, MicrobatchSpanCoversItsFirstAndLastEvents) {
  // Without markers: a microbatch ends with its last backward event, the next one's forward
  // activity starts the next; a forward-only pass saw no backward.
  TraceBuilder t;
  t.PlainMicrobatch().PlainMicrobatch().Step().Forward().Footer();
  Auditor auditor(Expectation{});
  std::vector<MicrobatchSpan> spans;
  auditor.on_microbatch_span = [&](const v1::MicrobatchResult& row, const MicrobatchSpan& s) {
    EXPECT_EQ(row.index(), spans.size());
    spans.push_back(s);
  };
  t.Feed(&auditor);
  ASSERT_EQ(spans.size(), 3u);
  const auto& r = t.records();  // header, then 7 events per plain microbatch, step, forward
  EXPECT_EQ(spans[0].first_ns, r[1].event().timestamp_ns());
  EXPECT_EQ(spans[0].last_ns, r[7].event().timestamp_ns());
  EXPECT_EQ(spans[1].first_ns, r[8].event().timestamp_ns());
  EXPECT_EQ(spans[1].last_ns, r[14].event().timestamp_ns());
  EXPECT_TRUE(spans[1].backward_seen);
  EXPECT_EQ(spans[2].first_ns, r[16].event().timestamp_ns());
  EXPECT_EQ(spans[2].last_ns, r[16].event().timestamp_ns());
  EXPECT_FALSE(spans[2].backward_seen);
}

TEST(Auditor, LiveCallbacksFireAsMicrobatchesCloseAndOnTheFirstExcess) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch(1, 1);
  t.Begin().Forward().BackwardBegin().Backward().Backward().Backward().BackwardEnd().End();
  t.Footer();
  Auditor a(Expectation{});
  std::vector<v1::MicrobatchResult> closed;
  std::vector<v1::Violation> violations;
  int excess = 0;
  uint64_t excess_count = 0;
  a.on_microbatch = [&](const v1::MicrobatchResult& r) { closed.push_back(r); };
  a.on_violation = [&](const v1::Violation& v) { violations.push_back(v); };
  a.on_excess = [&](const v1::Event& e, v1::Pass pass, uint64_t count) {
    ++excess;
    excess_count = count;
    EXPECT_EQ(pass, v1::BACKWARD);
    EXPECT_EQ(e.kind(), v1::UPDATE_BACKWARD);
    EXPECT_EQ(closed.size(), 1u);  // before the failing microbatch closed
  };
  t.Feed(&a);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(closed[1].verdict(), v1::FAIL);
  EXPECT_EQ(excess, 1);  // once per microbatch and direction
  EXPECT_EQ(excess_count, 2u);
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_EQ(violations[0].kind(), v1::Violation::BACKWARD_COUNT);
}

}  // namespace
}  // namespace fp8audit::reports
