#include "reports/auditor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::TraceBuilder;

std::string AllExplanations(const v1::MicrobatchResult& row) {
  std::string all;
  for (const auto& e : row.explanations()) all += e + "\n";
  return all;
}

TEST(Auditor, MarkersSplitMicrobatchesAndCountUpdates) {
  TraceBuilder t(0, 1000, "nvtx");
  t.MarkedMicrobatch(1, 1).MarkedMicrobatch(1, 1).MarkedMicrobatch(29, 196).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  EXPECT_EQ(r.microbatches(0).forward_updates(), 1u);
  EXPECT_EQ(r.microbatches(0).backward_updates(), 1u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);
  const auto& bad = r.microbatches(2);
  EXPECT_EQ(bad.index(), 2u);
  EXPECT_EQ(bad.forward_updates(), 29u);
  EXPECT_EQ(bad.backward_updates(), 196u);
  EXPECT_EQ(bad.expected_forward(), 1u);
  EXPECT_EQ(bad.expected_backward(), 1u);
  EXPECT_EQ(bad.verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 2);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::FORWARD_COUNT);
  EXPECT_EQ(r.violations(0).microbatch(), 2u);
  EXPECT_EQ(r.violations(0).rank(), 0);
  EXPECT_EQ(r.violations(0).message(), "microbatch 2 (step 0): 29 forward updates, expected 1");
  EXPECT_EQ(r.violations(1).kind(), v1::Violation::BACKWARD_COUNT);
  EXPECT_EQ(r.totals().microbatches(), 3u);
  EXPECT_EQ(r.totals().forward_updates(), 31u);
  EXPECT_EQ(r.totals().backward_updates(), 198u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  EXPECT_EQ(r.verdict(), v1::FAIL);
}

TEST(Auditor, BackwardToForwardStartsNextMicrobatchWithoutMarkers) {
  TraceBuilder t;
  t.PlainMicrobatch().PlainMicrobatch().PlainMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.forward_updates(), 1u);
    EXPECT_EQ(row.backward_updates(), 1u);
    EXPECT_EQ(row.verdict(), v1::PASS) << AllExplanations(row);
  }
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_EQ(r.violations_size(), 0);
}

// A failing trace without markers says how its microbatches were cut (issue 19: a test session's
// unrelated passes fall into one cut, failing where nothing ran twice); a marked one does not.
TEST(Auditor, AFailingTraceWithoutMarkersSaysItsMicrobatchesWereCutAtPassBoundaries) {
  TraceBuilder plain;
  plain.PlainMicrobatch(1, 1).PlainMicrobatch(1, 2).Footer();
  const v1::RankReport r = plain.Audit();
  ASSERT_EQ(r.totals().failing_microbatches(), 1u);
  bool said = false;
  for (const auto& note : r.recording().notes()) {
    said = said || note.find("no fp8audit.microbatch markers") != std::string::npos;
  }
  EXPECT_TRUE(said);

  TraceBuilder marked(0, 1000, "nvtx");
  marked.MarkedMicrobatch(1, 1).MarkedMicrobatch(1, 2).Footer();
  const v1::RankReport with_markers = marked.Audit();
  for (const auto& note : with_markers.recording().notes()) {
    EXPECT_EQ(note.find("no fp8audit.microbatch markers"), std::string::npos) << note;
  }
  TraceBuilder passing;
  passing.PlainMicrobatch(1, 1).Footer();
  const v1::RankReport passed = passing.Audit();
  for (const auto& note : passed.recording().notes()) {
    EXPECT_EQ(note.find("no fp8audit.microbatch markers"), std::string::npos) << note;
  }
}

TEST(Auditor, SecondBackwardWithoutForwardBetweenStaysInTheMicrobatch) {
  TraceBuilder t;
  t.PlainMicrobatch(1, 1);
  t.BackwardBegin().BackwardEnd();  // e.g. a second autograd.grad call, no update
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.verdict(), v1::PASS);
}

TEST(Auditor, GraphLaunchCountsEachUpdateInside) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward(3).BackwardBegin().Backward(0).BackwardEnd().End();
  t.Footer();
  const v1::RankReport r = t.Audit(Expectation{3, 1});
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).forward_updates(), 3u);   // one launch, count 3
  EXPECT_EQ(r.microbatches(0).backward_updates(), 1u);  // count 0 reads as 1
  EXPECT_EQ(r.verdict(), v1::PASS);
}

TEST(Auditor, GraphLaunchExplainsTheRangeOfExtraUpdates) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward(4).BackwardBegin().Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)),
                       "forward updates 2-4 (one launch of 4), expected 1"))
      << AllExplanations(r.microbatches(0));
}

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

TEST(Auditor, RecomputeInsideBackwardDoesNotSplitTheMicrobatchAndIsExplained) {
  // Reentrant checkpointing of three modules as Transformer Engine does without the fix: every
  // recompute segment updates forward state, every recomputed module updates backward state.
  TraceBuilder t;
  t.Autocast(true, 1);
  for (uint64_t f = 1; f <= 3; ++f) t.CheckpointEnter(f, 1).Module(true, "fc").CheckpointExit(f);
  t.Forward().Autocast(false, 0);
  t.BackwardBegin();
  for (uint64_t f = 3; f >= 1; --f) {
    const uint64_t th = TraceBuilder::kAutogradThread;
    t.CheckpointEnter(f, 2, v1::REENTRANT, th).Autocast(true, 1, th);
    t.Module(true, "fc" + std::to_string(f), th);
    t.Autocast(false, 0, th).Update(v1::UPDATE_FORWARD, 0, th);  // recompute autocast exit
    t.CheckpointExit(f, th).Module(false, "fc" + std::to_string(f), th).Backward();
  }
  t.BackwardEnd();
  t.PlainMicrobatch();  // the next microbatch is separate
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  const auto& row = r.microbatches(0);
  EXPECT_EQ(row.forward_updates(), 4u);
  EXPECT_EQ(row.backward_updates(), 3u);
  EXPECT_EQ(row.verdict(), v1::FAIL);
  const std::string why = AllExplanations(row);
  EXPECT_TRUE(Contains(why, "4 forward updates, expected 1: 3 during checkpoint recompute")) << why;
  EXPECT_TRUE(Contains(why, "forward update 2, expected 1")) << why;
  EXPECT_TRUE(Contains(why, "during recompute of reentrant checkpoint frame")) << why;
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);
}

TEST(Auditor, ViolationContextShowsCheckpointFrameAndKernel) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward().BackwardBegin();
  const uint64_t th = TraceBuilder::kAutogradThread;
  t.CheckpointEnter(7, 2, v1::NON_REENTRANT, th).Update(v1::UPDATE_FORWARD, 0, th);
  t.CheckpointExit(7, th).Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.violations_size(), 1);
  const v1::Violation& v = r.violations(0);
  EXPECT_EQ(v.kind(), v1::Violation::FORWARD_COUNT);
  ASSERT_GE(v.context_size(), 3);
  EXPECT_EQ(v.context(0).kind(), v1::MICROBATCH_BEGIN);  // times are relative to it
  bool frame = false;
  bool kernel = false;
  for (const auto& e : v.context()) {
    if (e.kind() == v1::CHECKPOINT_ENTER && e.frame() == 7 && e.checkpoint_phase() == 2) {
      frame = true;
    }
    if (e.kind() == v1::UPDATE_FORWARD && e.detail() == TraceBuilder::kUpdateKernel &&
        e.thread_id() == th) {
      kernel = true;
    }
  }
  EXPECT_TRUE(frame);
  EXPECT_TRUE(kernel);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)),
                       "during recompute of non-reentrant checkpoint frame 7"));
}

TEST(Auditor, StepClosesTheMicrobatchAndAdvancesTheStepWithoutMarkers) {
  TraceBuilder t;
  t.PlainMicrobatch().Step().PlainMicrobatch().PlainMicrobatch().Step().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  EXPECT_EQ(r.microbatches(0).step(), 0u);
  EXPECT_EQ(r.microbatches(1).step(), 1u);
  EXPECT_EQ(r.microbatches(2).step(), 1u);
}

TEST(Auditor, StepInsideMarkersOnlyAdvancesTheStep) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().PlainMicrobatch().Step().End().MarkedMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).step(), 0u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).step(), 1u);
}

TEST(Auditor, UpdateWithoutDirectionCountsByPassBoundaries) {
  TraceBuilder t;
  t.Update(v1::UPDATE).BackwardBegin().Update(v1::UPDATE, 0, TraceBuilder::kAutogradThread);
  t.BackwardEnd().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).forward_updates(), 1u);
  EXPECT_EQ(r.microbatches(0).backward_updates(), 1u);
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)),
                       "2 updates recorded without a direction counted by pass boundaries"));
}

TEST(Auditor, UpdateWithPassIsCountedInThatPass) {
  TraceBuilder t;
  t.BackwardBegin();
  t.Add(v1::UPDATE, TraceBuilder::kAutogradThread)->set_pass(v1::FORWARD);
  t.Update(v1::UPDATE, 0, TraceBuilder::kAutogradThread);
  t.BackwardEnd().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).forward_updates(), 1u);
  EXPECT_EQ(r.microbatches(0).backward_updates(), 1u);
}

TEST(Auditor, ForwardPassesSplitWithoutMarkersAndExpectTheirBackwardUpdate) {
  // Three forwards under autocast, no backward anywhere: each forward update starts the next
  // microbatch; each expects its backward update (its scales froze), and the trace says no
  // backward pass was observed. A job declared to have none passes.
  TraceBuilder t;
  for (int i = 0; i < 3; ++i) t.Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.forward_updates(), 1u);
    EXPECT_EQ(row.expected_backward(), 1u);
    EXPECT_EQ(row.verdict(), v1::FAIL);
    EXPECT_TRUE(Contains(AllExplanations(row), "backward scales froze"));
  }
  EXPECT_TRUE(r.no_backward_observed());
  const v1::RankReport eval = t.Audit(Expectation{1, 0});
  ASSERT_EQ(eval.microbatches_size(), 3);
  for (const auto& row : eval.microbatches()) EXPECT_EQ(row.verdict(), v1::PASS);
}

TEST(Auditor, MicrobatchWithoutAnyUpdateFails) {
  TraceBuilder t;
  t.Autocast(true, 1).Module(true, "fc1").Autocast(false, 0).BackwardBegin().BackwardEnd();
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 2);
  EXPECT_EQ(r.violations(0).message(), "microbatch 0 (step 0): 0 forward updates, expected 1");
}

TEST(Auditor, ExpectationsAreConfigurable) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch(2, 0).Footer();
  EXPECT_EQ(t.Audit(Expectation{2, 0}).verdict(), v1::PASS);
  EXPECT_EQ(t.Audit(Expectation{1, 1}).verdict(), v1::FAIL);
  TraceBuilder none(-1, 1000, "nvtx");
  none.Begin().BackwardBegin().BackwardEnd().End().Footer();
  EXPECT_EQ(none.Audit(Expectation{0, 0}).verdict(), v1::PASS);
}

TEST(Auditor, UnbalancedMarkersAreViolations) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.End();                                  // end before any begin
  t.Begin().PlainMicrobatch();              // no end
  t.Begin().PlainMicrobatch().End().End();  // a second end
  t.Footer();
  const v1::RankReport r = t.Audit();
  int unbalanced = 0;
  for (const auto& v : r.violations()) {
    if (v.kind() == v1::Violation::UNBALANCED) {
      ++unbalanced;
      EXPECT_EQ(v.context_size(), 1);
    }
  }
  EXPECT_EQ(unbalanced, 3);
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);  // the counts themselves are right
  EXPECT_EQ(r.verdict(), v1::FAIL);
}

TEST(Auditor, UpdatesAfterTheEndMarkerCountInThatMicrobatch) {
  TraceBuilder t(-1, 1000, "nvtx");
  // The markers wrap only the forward; backward runs after the end marker.
  t.Begin().Forward().End().BackwardBegin().Backward().BackwardEnd();
  t.Begin().Forward().End().BackwardBegin().Backward().Backward().BackwardEnd();
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).backward_updates(), 1u);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 2u);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(1)), "2 after the end marker"));
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(1)), "after the microbatch's end marker"));
}

TEST(Auditor, EventsBeforeTheFirstMarkerAreSegmentedByPassBoundaries) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.PlainMicrobatch(1, 1);  // warm-up before markers were set up
  t.MarkedMicrobatch(1, 1).MarkedMicrobatch(1, 1).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 3);
  EXPECT_EQ(r.verdict(), v1::PASS);
}

TEST(Auditor, ActivityWithoutUpdatesBeforeConfiguredMarkersIsNotAMicrobatch) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Autocast(true, 1).Autocast(false, 0).BackwardBegin().BackwardEnd();  // set-up, no update
  t.MarkedMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.verdict(), v1::PASS);
  // Without configured markers the same activity is a microbatch that saw no update.
  TraceBuilder plain(-1, 1000, "threads");
  plain.Autocast(true, 1).Autocast(false, 0).BackwardBegin().BackwardEnd().Footer();
  EXPECT_EQ(plain.Audit().microbatches_size(), 1);
}

TEST(Auditor, ReportedMarkersAreTheSegmentationTheAuditUsed) {
  // The agent writes "threads" unless FP8AUDIT_MICROBATCH_RANGE was set, but the default range
  // name still yields markers: the report says they segmented the trace.
  TraceBuilder unconfigured(0, 1000, "threads");
  unconfigured.MarkedMicrobatch().MarkedMicrobatch().Footer();
  v1::RankReport r = unconfigured.Audit();
  EXPECT_EQ(r.header().markers(), "nvtx");
  EXPECT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.verdict(), v1::PASS);

  // Configured, but no marker ever came: pass boundaries segmented it.
  TraceBuilder unused(0, 1000, "nvtx");
  unused.PlainMicrobatch().PlainMicrobatch().Footer();
  r = unused.Audit();
  EXPECT_EQ(r.header().markers(), "threads");
  EXPECT_EQ(r.microbatches_size(), 2);

  // A header that does not say (an older writer) gets the word too.
  TraceBuilder silent(0, 1000, "");
  silent.PlainMicrobatch().Footer();
  EXPECT_EQ(silent.Audit().header().markers(), "threads");

  // Set-up before the first marker is still judged by what the recorder was told: configured
  // markers skip it, unconfigured ones make it a microbatch without updates.
  TraceBuilder configured(0, 1000, "nvtx");
  configured.Autocast(true, 1).Autocast(false, 0).BackwardBegin().BackwardEnd();
  configured.MarkedMicrobatch().Footer();
  r = configured.Audit();
  EXPECT_EQ(r.header().markers(), "nvtx");
  EXPECT_EQ(r.microbatches_size(), 1);
  TraceBuilder late(0, 1000, "threads");
  late.Autocast(true, 1).Autocast(false, 0).BackwardBegin().BackwardEnd();
  late.MarkedMicrobatch().Footer();
  r = late.Audit();
  EXPECT_EQ(r.header().markers(), "nvtx");
  EXPECT_EQ(r.microbatches_size(), 2);

  // Another writer's own word (`fp8audit model` traces) is kept.
  TraceBuilder model(-1, 1000, "model");
  model.MarkedMicrobatch().Footer();
  EXPECT_EQ(model.Audit().header().markers(), "model");
}

TEST(Auditor, TraceWithoutFooterJudgesTheLastMicrobatchOnlyForExcess) {
  TraceBuilder t;
  t.PlainMicrobatch().Autocast(true, 1).Forward();  // killed after the next forward update
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(1)), "incomplete"));
  EXPECT_EQ(r.verdict(), v1::PASS);

  TraceBuilder excess;
  excess.PlainMicrobatch().Autocast(true, 1).Forward().BackwardBegin().Backward().Backward();
  const v1::RankReport e = excess.Audit();
  ASSERT_EQ(e.microbatches_size(), 2);
  EXPECT_EQ(e.microbatches(1).verdict(), v1::FAIL);
  EXPECT_TRUE(Contains(e.violations(0).message(), "(incomplete microbatch)"));
}

TEST(Auditor, MarkedMicrobatchWithEndIsCompleteEvenWithoutFooter) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.Begin().Forward().End();  // ended, no backward seen: forward-only, complete
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_FALSE(Contains(AllExplanations(r.microbatches(0)), "incomplete"));
}

TEST(Auditor, DroppedEventsMakeTheAuditIncomplete) {
  TraceBuilder t;
  t.PlainMicrobatch().Footer(/*dropped=*/12);
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::TRACE_DAMAGED);
  EXPECT_TRUE(Contains(r.violations(0).message(), "dropped 12 events"));
  EXPECT_EQ(r.verdict(), v1::FAIL);
}

TEST(Auditor, DamageSetsTheReportAndJudgesTheOpenMicrobatchAsIncomplete) {
  TraceBuilder t;
  t.PlainMicrobatch().Autocast(true, 1).Forward();
  Auditor auditor(Expectation{});
  for (const auto& rec : t.records()) auditor.OnRecord(rec);
  auditor.OnDamage("record 12 at byte 400: truncated");
  auditor.Finish();
  const v1::RankReport& r = auditor.report();
  EXPECT_EQ(r.damage(), "record 12 at byte 400: truncated");
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::TRACE_DAMAGED);
  EXPECT_EQ(r.verdict(), v1::FAIL);
}

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

// Events of kinds a newer recorder writes are skipped, counted and said once (issue 34 item 12),
// not silently dropped; the microbatches around them are judged as before.
TEST(Auditor, EventsOfUnknownKindsAreSkippedWithOneNote) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch(1, 1);
  t.Add(static_cast<v1::EventKind>(999));
  t.Add(static_cast<v1::EventKind>(1000));
  t.MarkedMicrobatch(1, 1).Footer();
  const v1::RankReport r = t.Audit();
  EXPECT_EQ(r.verdict(), v1::PASS) << r.DebugString();
  EXPECT_EQ(r.totals().microbatches(), 2u);
  ASSERT_EQ(r.recording().notes_size(), 1) << r.DebugString();
  EXPECT_EQ(r.recording().notes(0).rfind("2 events of kinds this fp8audit does not know (the "
                                         "first: kind 999) were skipped",
                                         0),
            0u)
      << r.recording().notes(0);
}

TEST(Auditor, ExtraUpdatesInTheSamePlaceShareOneExplanation) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch(1, 196).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  const std::string why = AllExplanations(r.microbatches(0));
  EXPECT_TRUE(Contains(why, "backward updates 2-196, expected 1, from t=")) << why;
  EXPECT_TRUE(Contains(why,
                       ": outside any checkpoint, autocast depth 0, after module fc1 (thread "
                       "4343, kernel transformer_engine::delayed_scaling_recipe::kernel_bulk)"))
      << why;
  EXPECT_EQ(r.microbatches(0).explanations_size(), 2) << why;
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

TEST(Auditor, KernelLaunchesComeFromTheFooterElseTheEventsRunningCount) {
  TraceBuilder t(-1, 1000, "nvtx");
  t.MarkedMicrobatch();
  EXPECT_EQ(t.Audit().totals().kernel_launches(), 2u);  // the update events themselves
  t.Add(v1::MODULE_FORWARD)->set_kernel_launches(1234);
  EXPECT_EQ(t.Audit().totals().kernel_launches(), 1234u);
  t.Footer();
  v1::TraceRecord footer = t.records().back();
  footer.mutable_footer()->set_kernel_launches(5000);
  Auditor a(Expectation{});
  for (size_t i = 0; i + 1 < t.records().size(); ++i) a.OnRecord(t.records()[i]);
  a.OnRecord(footer);
  a.Finish();
  EXPECT_EQ(a.report().totals().kernel_launches(), 5000u);
}

// --- Several probes: only UPDATE_* events count; cross-checks and facts are neutral. ---

TEST(AuditorProbes, CrossChecksAreTalliedButNeitherCountedNorSegmenting) {
  // Every update seen three times (te-call counted, its kernel and the Python hook cross-checks),
  // without markers; a stray forward cross-check after the last backward must not start a third
  // microbatch, nor a backward one before the first open one.
  TraceBuilder t;
  t.Probes("all", {"te-call", "kernel", "python-hook"});
  t.TeVersion("2.20.2");
  t.Hook(v1::CROSSCHECK_UPDATE_BACKWARD, 1, 0, TraceBuilder::kAutogradThread);
  t.Autocast(true, 1).TeMicrobatch().Autocast(true, 1).TeMicrobatch();
  t.Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1).KernelCrossCheck(v1::CROSSCHECK_UPDATE);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.forward_updates(), 1u);
    EXPECT_EQ(row.backward_updates(), 1u);
    EXPECT_EQ(row.verdict(), v1::PASS) << AllExplanations(row);
  }
  const v1::SourceTallies& s = r.microbatches(0).by_source();
  EXPECT_EQ(s.te_call().forward(), 1u);
  EXPECT_EQ(s.te_call().backward(), 1u);
  EXPECT_EQ(s.te_call().crosscheck_forward(), 0u);
  EXPECT_EQ(s.kernel().forward(), 0u);
  EXPECT_EQ(s.kernel().crosscheck_forward(), 1u);
  EXPECT_EQ(s.kernel().crosscheck_backward(), 1u);
  EXPECT_EQ(s.python_hook().crosscheck_forward(), 1u);
  EXPECT_EQ(s.python_hook().crosscheck_backward(), 1u);
  EXPECT_FALSE(s.has_other());
  EXPECT_EQ(r.microbatches(0).probe_notes_size(), 0);
  // The stray cross-checks belong to the microbatch still open: seen there, not counted.
  ASSERT_EQ(r.microbatches(1).probe_notes_size(), 1);
  EXPECT_EQ(r.microbatches(1).probe_notes(0),
            "probes disagree on forward updates: te-call 1, kernel 2, python-hook 2 (counted 1)");
  EXPECT_EQ(r.totals().forward_updates(), 2u);
  EXPECT_EQ(r.totals().backward_updates(), 2u);
  EXPECT_EQ(r.verdict(), v1::PASS);
}

TEST(AuditorProbes, CrossChecksAreNoPassActivity) {
  // Forward passes without markers: each forward update starts the next microbatch. A
  // cross-check carries a pass, even the other one (a kernel classified by its dtype), but is no
  // backward activity: the trace observed no backward pass, and a job declared without one
  // passes.
  TraceBuilder t;
  t.Probes("all", {"te-call", "kernel"});
  for (int i = 0; i < 3; ++i) {
    t.TeCall(v1::UPDATE_FORWARD);
    v1::Event* e = t.Add(v1::CROSSCHECK_UPDATE_BACKWARD);
    e->set_source(v1::KERNEL);
    e->set_pass(v1::BACKWARD);
  }
  t.Footer();
  EXPECT_TRUE(t.Audit().no_backward_observed());
  const v1::RankReport r = t.Audit(Expectation{1, 0});
  ASSERT_EQ(r.microbatches_size(), 3);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.forward_updates(), 1u);
    EXPECT_EQ(row.expected_backward(), 0u);
    EXPECT_EQ(row.verdict(), v1::PASS) << AllExplanations(row);
    EXPECT_EQ(row.by_source().kernel().crosscheck_backward(), 1u);
  }
}

TEST(AuditorProbes, FactsAndProbeChangesDoNotOpenAMicrobatch) {
  // TE's version, its patch and a probe change long before the first microbatch: the
  // microbatch's span starts at its own first event, and context times are relative to it.
  TraceBuilder t;
  t.Probes("auto", {"kernel"});
  t.TeVersion("2.20.2").TePatched("2.20.2", "fixed");
  t.ProbesChanged({"te-call", "python-hook"}, "CUPTI released: Transformer Engine is loaded");
  t.Wait(5000000000);
  t.Autocast(true, 1).TeCall(v1::UPDATE_FORWARD).Autocast(false, 0);
  t.BackwardBegin().TeCall(v1::UPDATE_BACKWARD, TraceBuilder::kAutogradThread);
  t.TeCall(v1::UPDATE_BACKWARD, TraceBuilder::kAutogradThread).BackwardEnd().Footer();
  Auditor auditor(Expectation{});
  std::vector<MicrobatchSpan> spans;
  auditor.on_microbatch_span = [&](const v1::MicrobatchResult&, const MicrobatchSpan& s) {
    spans.push_back(s);
  };
  t.Feed(&auditor);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].first_ns, t.records()[4].event().timestamp_ns());  // the autocast enter
  const v1::RankReport& r = auditor.report();
  ASSERT_EQ(r.violations_size(), 1);
  ASSERT_GT(r.violations(0).context_size(), 0);
  EXPECT_EQ(r.violations(0).context(0).kind(), v1::AUTOCAST_ENTER);
}

TEST(AuditorProbes, RecordingSaysWhichProbesRanAndWhichWereReleased) {
  TraceBuilder t;
  t.Probes("auto", {"python-hook"});
  t.ProbesChanged({"python-hook", "kernel"}, "CUPTI subscribed");
  t.TeMicrobatch();
  t.ProbesChanged({"python-hook", "te-call"},
                  "CUPTI released: Transformer Engine is loaded and counts through its update "
                  "calls");
  t.TeMicrobatch().Footer();
  const v1::RankReport r = t.Audit();
  const v1::Recording& rec = r.recording();
  EXPECT_EQ(rec.probe_mode(), "auto");
  ASSERT_EQ(rec.probes_size(), 3);
  EXPECT_EQ(rec.probes(0), "python-hook");
  EXPECT_EQ(rec.probes(1), "kernel");
  EXPECT_EQ(rec.probes(2), "te-call");
  ASSERT_EQ(rec.released_size(), 1);
  EXPECT_EQ(rec.released(0), "kernel");
  ASSERT_EQ(rec.probe_changes_size(), 2);
  EXPECT_EQ(rec.probe_changes(0), "CUPTI subscribed");
  EXPECT_FALSE(rec.kernel_launches_not_counted());
}

TEST(AuditorProbes, KernelLaunchesAreNotCountedWhenCuptiNeverRan) {
  TraceBuilder te;
  te.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2").TeMicrobatch().Footer();
  EXPECT_TRUE(te.Audit().recording().kernel_launches_not_counted());
  TraceBuilder cupti;
  cupti.Probes("kernel", {"kernel"}).PlainMicrobatch().Footer();
  EXPECT_FALSE(cupti.Audit().recording().kernel_launches_not_counted());
  TraceBuilder old;  // an agent from before the probes, or another recorder: nothing is claimed
  old.PlainMicrobatch().Footer();
  EXPECT_FALSE(old.Audit().recording().kernel_launches_not_counted());
  EXPECT_EQ(old.Audit().recording().probes_size(), 0);
}

TEST(AuditorProbes, SemanticsComeFromTheTeVersionThePatchOrTheUser) {
  auto audit = [](TraceBuilder& t, const std::string& given) {
    t.TeMicrobatch(1, 3).Footer();
    AuditorOptions o;
    o.semantics = given;
    Auditor a(o);
    t.Feed(&a);
    return a.report();
  };
  TraceBuilder te220;
  te220.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  v1::RankReport r = audit(te220, "");
  EXPECT_EQ(r.recording().te_version(), "2.20.2");
  EXPECT_FALSE(r.recording().te_patched());
  EXPECT_EQ(r.recording().semantics(), "te-2.20");
  EXPECT_EQ(r.recording().semantics_from(), "te_version");
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)), "model semantics te-2.20"))
      << AllExplanations(r.microbatches(0));

  TraceBuilder given;
  given.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  r = audit(given, "te-172bd93");
  EXPECT_EQ(r.recording().semantics(), "te-172bd93");
  EXPECT_EQ(r.recording().semantics_from(), "flag");

  TraceBuilder patched;
  patched.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  patched.TePatched("2.20.2", "fixed");
  r = audit(patched, "");
  EXPECT_TRUE(r.recording().te_patched());
  EXPECT_EQ(r.recording().patched_semantics(), "fixed");
  EXPECT_EQ(r.recording().semantics(), "fixed");
  EXPECT_EQ(r.recording().semantics_from(), "patch");
  EXPECT_TRUE(Contains(AllExplanations(r.microbatches(0)), "model semantics fixed"))
      << AllExplanations(r.microbatches(0));

  TraceBuilder te219;  // 2.19's semantics are 172bd93's (state/SEMANTICS.md)
  te219.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.19.1");
  r = audit(te219, "");
  EXPECT_EQ(r.recording().semantics(), "te-172bd93");
  EXPECT_EQ(r.recording().semantics_from(), "te_version");

  TraceBuilder unknown;
  unknown.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.15.0");
  r = audit(unknown, "");
  EXPECT_EQ(r.recording().te_version(), "2.15.0");
  EXPECT_EQ(r.recording().semantics(), "");
  EXPECT_FALSE(Contains(AllExplanations(r.microbatches(0)), "model semantics"));
}

TEST(AuditorProbes, TesOwnSchedulingChoosesItsSemanticsBeforeTheVersionsAndNamesTheScope) {
  // TE PR #3456 on a 2.20 base: the hook saw its scheduling; two backward() calls in a
  // microbatch, two backward updates.
  TraceBuilder t;
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2", "te-3456");
  t.MarkedMicrobatch(1, 2).Footer();
  Auditor a{AuditorOptions{}};
  t.Feed(&a);
  const v1::RankReport r = a.report();
  EXPECT_EQ(r.recording().scheduling_semantics(), "te-3456");
  EXPECT_EQ(r.recording().semantics(), "te-3456");
  EXPECT_EQ(r.recording().semantics_from(), "scheduling");
  ASSERT_EQ(r.microbatches_size(), 1);
  const std::string why = AllExplanations(r.microbatches(0));
  EXPECT_TRUE(Contains(why, "model semantics te-3456 (from TE 2.20.2's scheduling")) << why;
  EXPECT_TRUE(Contains(why, "with te.quantization_backward_scope():")) << why;
  EXPECT_FALSE(Contains(why, "--fix-te")) << why;  // the fix stands aside on such a TE
}

TEST(AuditorProbes, ProbesThatSeeDifferentCountsInAMicrobatchGetANote) {
  // te-call counted one backward update, the kernel probe saw two update launches inside it.
  TraceBuilder t;
  t.Probes("all", {"te-call", "kernel", "python-hook"}).TeVersion("2.20.2");
  t.TeMicrobatch();
  const uint64_t bw = TraceBuilder::kAutogradThread;
  t.TeCall(v1::UPDATE_FORWARD).KernelCrossCheck(v1::CROSSCHECK_UPDATE_FORWARD);
  t.Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1).BackwardBegin();
  t.TeCall(v1::UPDATE_BACKWARD, bw).KernelCrossCheck(v1::CROSSCHECK_UPDATE_BACKWARD, bw);
  t.KernelCrossCheck(v1::CROSSCHECK_UPDATE_BACKWARD, bw);
  t.Hook(v1::CROSSCHECK_UPDATE_BACKWARD, 1, 0, bw).BackwardEnd().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).probe_notes_size(), 0);
  const v1::MicrobatchResult& row = r.microbatches(1);
  EXPECT_EQ(row.backward_updates(), 1u);  // counted once, as recorded
  EXPECT_EQ(row.verdict(), v1::PASS);
  ASSERT_EQ(row.probe_notes_size(), 1);
  EXPECT_EQ(row.probe_notes(0),
            "probes disagree on backward updates: te-call 1, kernel 2, python-hook 1 (counted 1)");
  EXPECT_EQ(r.recording().disagreeing_microbatches(), 1u);
  std::string notes;
  for (const auto& n : r.recording().notes()) notes += n + "\n";
  EXPECT_TRUE(Contains(notes, "probes disagree in 1 microbatch (1)")) << notes;
  EXPECT_EQ(r.recording().by_source().kernel().crosscheck_backward(), 3u);
  EXPECT_EQ(r.recording().by_source().te_call().backward(), 2u);
}

TEST(AuditorProbes, ProbesNotRunningThroughoutOrNeverHeardFromAreNotCompared) {
  // The kernel probe counts (no TE here: the te-call probe is interposed but never called, the
  // Python hook armed but TE never imported); a microbatch in which CUPTI was released is not
  // compared with the te-call probe either.
  TraceBuilder t;
  t.Probes("auto", {"te-call", "kernel", "python-hook"});
  t.PlainMicrobatch();
  t.Autocast(true, 1).Forward();
  t.ProbesChanged({"te-call", "python-hook"}, "CUPTI released: Transformer Engine is loaded");
  t.BackwardBegin().TeCall(v1::UPDATE_BACKWARD, TraceBuilder::kAutogradThread).BackwardEnd();
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.probe_notes_size(), 0) << row.probe_notes(0);
  }
  EXPECT_EQ(r.microbatches(1).by_source().kernel().forward(), 1u);
  EXPECT_EQ(r.microbatches(1).by_source().te_call().backward(), 1u);
  EXPECT_EQ(r.recording().disagreeing_microbatches(), 0u);
}

TEST(AuditorProbes, UpdatesOnlyThePythonHookSawOnTheUnfusedPathGetOneNote) {
  // NVTE_UNFUSED_FP8_UPDATE=1: no C call, no kernel; the hook's updates count and say unfused.
  TraceBuilder t;
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  for (int i = 0; i < 2; ++i) {
    t.Hook(v1::UPDATE_FORWARD, 1, 1).BackwardBegin();
    t.Hook(v1::UPDATE_BACKWARD, 1, 1, TraceBuilder::kAutogradThread).BackwardEnd();
  }
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  for (const auto& row : r.microbatches()) {
    EXPECT_EQ(row.verdict(), v1::PASS);
    EXPECT_EQ(row.by_source().python_hook().forward(), 1u);
    EXPECT_EQ(row.by_source().python_hook().unfused_forward(), 1u);
    EXPECT_EQ(row.by_source().python_hook().unfused_backward(), 1u);
    EXPECT_EQ(row.probe_notes_size(), 0) << row.probe_notes(0);  // te-call cannot see these
  }
  int unfused_lines = 0;
  for (const std::string& n : r.recording().notes()) {
    if (Contains(n, "unfused")) {
      ++unfused_lines;
      EXPECT_EQ(n,
                "4 updates in 2 microbatches (0, 1) came only from the Python hook: Transformer "
                "Engine's unfused update path (NVTE_UNFUSED_FP8_UPDATE=1 or a callable amax or "
                "scale algorithm), where the te-call and kernel probes see nothing");
    }
  }
  EXPECT_EQ(unfused_lines, 1);
}

}  // namespace
}  // namespace fp8audit::reports
