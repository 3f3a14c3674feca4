// Segmentation and counting apart from the judging: the context updates happen in, which events
// cut or close microbatches, what makes a closed segment a microbatch.
#include "reports/segmentation.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp8audit {
namespace {

using reports::Apart;
using reports::Context;
using reports::Segment;
using reports::Segmenter;
using reports::Unbalance;

v1::Event Make(v1::EventKind kind, uint64_t thread = 1) {
  v1::Event e;
  e.set_kind(kind);
  e.set_thread_id(thread);
  return e;
}

v1::Event Enter(uint64_t frame, uint32_t phase) {
  v1::Event e = Make(v1::CHECKPOINT_ENTER);
  e.set_frame(frame);
  e.set_checkpoint_phase(phase);
  return e;
}

// A Segmenter that records what it closes (forward, backward counts and completeness) and the
// unbalanced markers it reports; it counts updates as the auditor does.
struct Recorder {
  struct Closed {
    uint64_t forward;
    uint64_t backward;
    bool complete;
  };
  std::vector<Closed> closed;
  std::vector<Unbalance> unbalanced;
  Segmenter segments{[this](bool complete) {
                       Segment& seg = segments.current();
                       if (!seg.open) return;
                       if (seg.IsMicrobatch(segments.markers_configured())) {
                         closed.push_back({seg.count[0], seg.count[1], complete});
                       }
                       seg.Reset();
                     },
                     [this](const v1::Event&, Unbalance what) { unbalanced.push_back(what); }};

  void Feed(const v1::Event& event) {
    segments.Advance(event);
    int dir = 0;
    bool inferred = false;
    if (segments.Assign(event, 1, &dir, &inferred)) {
      segments.current().Tally(event, dir, 1, inferred, segments.context());
    }
  }
  void Feed(v1::EventKind kind, uint64_t thread = 1) { Feed(Make(kind, thread)); }
};

TEST(Segmentation, RecomputeIsTheInnermostRecomputingFrameUntilItExits) {
  Context ctx;
  ctx.Apply(Enter(1, 2));
  ctx.Apply(Enter(2, 1));
  EXPECT_TRUE(ctx.InRecompute());
  EXPECT_EQ(ctx.Shown(/*recompute=*/true)->id, 1u);
  EXPECT_EQ(ctx.Shown(/*recompute=*/false)->id, 2u);
  v1::Event exit = Make(v1::CHECKPOINT_EXIT);
  exit.set_frame(1);
  ctx.Apply(exit);
  EXPECT_FALSE(ctx.InRecompute());
  EXPECT_EQ(ctx.Innermost()->id, 2u);
}

TEST(Segmentation, WithoutMarkersAReturnFromBackwardToForwardCutsTheMicrobatch) {
  Recorder r;
  for (int i = 0; i < 2; ++i) {
    r.Feed(v1::UPDATE_FORWARD);
    r.Feed(v1::BACKWARD_BEGIN, 2);
    r.Feed(v1::UPDATE_BACKWARD, 2);
    r.Feed(v1::BACKWARD_END);
  }
  ASSERT_EQ(r.closed.size(), 1u);
  EXPECT_EQ(r.closed[0].forward, 1u);
  EXPECT_EQ(r.closed[0].backward, 1u);
  r.segments.CloseAll(/*complete_unmarked=*/false);
  ASSERT_EQ(r.closed.size(), 2u);
  EXPECT_FALSE(r.closed[1].complete);
}

TEST(Segmentation, AnUpdateWithoutDirectionCountsInThePassTheBoundariesSay) {
  Recorder r;
  r.Feed(v1::BACKWARD_BEGIN, 2);
  r.Feed(v1::UPDATE, 2);
  EXPECT_EQ(r.segments.current().count[1], 1u);
  EXPECT_EQ(r.segments.current().inferred, 1u);
}

TEST(Segmentation, AnEndMarkerBeforeAnyBeginIsUnbalanced) {
  Recorder r;
  r.Feed(v1::MICROBATCH_END);
  ASSERT_EQ(r.unbalanced.size(), 1u);
  EXPECT_EQ(r.unbalanced[0], Unbalance::kEndBeforeBegin);
  r.Feed(v1::MICROBATCH_BEGIN);
  r.Feed(v1::MICROBATCH_BEGIN);
  ASSERT_EQ(r.unbalanced.size(), 2u);
  EXPECT_EQ(r.unbalanced[1], Unbalance::kBeginWithoutEnd);
}

TEST(Segmentation, AKeyedMicrobatchResumesAcrossAnotherOnesRangeUntilItsBackwardEnded) {
  Recorder r;
  auto begin = [&](uint64_t id) {
    v1::Event e = Make(v1::MICROBATCH_BEGIN);
    e.set_microbatch_id(id);
    r.Feed(e);
  };
  begin(7);
  r.Feed(v1::UPDATE_FORWARD);
  r.Feed(v1::MICROBATCH_END);
  begin(8);
  r.Feed(v1::UPDATE_FORWARD);
  r.Feed(v1::MICROBATCH_END);
  begin(7);
  r.Feed(v1::UPDATE_BACKWARD, 1);
  r.Feed(v1::MICROBATCH_END);
  EXPECT_TRUE(r.closed.empty());  // 8 waits for its next range, 7's backward range just ended
  begin(9);                       // 7 is done
  ASSERT_EQ(r.closed.size(), 1u);
  EXPECT_EQ(r.closed[0].forward, 1u);
  EXPECT_EQ(r.closed[0].backward, 1u);
  r.Feed(v1::STEP);  // a step ends the waiting 8
  ASSERT_EQ(r.closed.size(), 2u);
  EXPECT_EQ(r.closed[1].forward, 1u);
  EXPECT_EQ(r.closed[1].backward, 0u);
}

TEST(Segmentation, SetUpBeforeConfiguredMarkersIsNoMicrobatch) {
  Segment seg;
  seg.open = true;
  seg.forward_seen = true;
  EXPECT_TRUE(seg.IsMicrobatch(/*markers_configured=*/false));
  EXPECT_FALSE(seg.IsMicrobatch(/*markers_configured=*/true));
  seg.count[0] = 1;
  EXPECT_TRUE(seg.IsMicrobatch(/*markers_configured=*/true));
}

TEST(Segmentation, AMarkedRangeWithABackwardAndNoForwardCannotBeAttributed) {
  Segment seg;
  seg.marked = true;
  seg.count[1] = 1;
  EXPECT_EQ(reports::Unattributable(seg, /*fail=*/false), Apart::kSplit);
  seg.keyed = true;
  EXPECT_EQ(reports::Unattributable(seg, /*fail=*/false), Apart::kNone);
  Segment cut;
  cut.backward_passes = 2;
  EXPECT_EQ(reports::Unattributable(cut, /*fail=*/false), Apart::kNone);
  EXPECT_EQ(reports::Unattributable(cut, /*fail=*/true), Apart::kCrowded);
}

// Many threads with microbatches open at once (issue 34 item 9): 300 threads, every one begun
// before any ends, each count their own thread's updates (256 were once the most kept apart).
TEST(Segmentation, ThreeHundredThreadsWithMicrobatchesOpenAtOnceEachCountTheirOwn) {
  Recorder r;
  constexpr uint64_t kThreads = 300;
  for (uint64_t t = 1; t <= kThreads; ++t) r.Feed(v1::MICROBATCH_BEGIN, t);
  for (uint64_t t = 1; t <= kThreads; ++t) r.Feed(v1::UPDATE_FORWARD, t);
  for (uint64_t t = kThreads; t >= 1; --t) r.Feed(v1::UPDATE_BACKWARD, t);
  for (uint64_t t = 1; t <= kThreads; ++t) r.Feed(v1::MICROBATCH_END, t);
  r.Feed(v1::STEP, 1);
  r.segments.CloseAll(/*complete_unmarked=*/true);
  EXPECT_TRUE(r.unbalanced.empty());
  ASSERT_EQ(r.closed.size(), kThreads);
  for (const auto& c : r.closed)
    EXPECT_EQ(std::make_pair(c.forward, c.backward), std::make_pair(1ul, 1ul));
}

// Short-lived threads: a later thread the system gives an ended thread's id starts a microbatch
// of its own, never counting in the ended one (a few threads alive at a time, ids reused).
TEST(Segmentation, AnEndedThreadsMicrobatchNeverTakesALaterThreadWithItsId) {
  Recorder r;
  constexpr uint64_t kIds[] = {11, 12, 13};
  for (int round = 0; round < 20; ++round) {
    for (uint64_t id : kIds) r.Feed(v1::MICROBATCH_BEGIN, id);
    for (uint64_t id : kIds) {
      r.Feed(v1::UPDATE_FORWARD, id);
      r.Feed(v1::UPDATE_BACKWARD, id);
      r.Feed(v1::MICROBATCH_END, id);
    }
  }
  r.segments.CloseAll(/*complete_unmarked=*/true);
  EXPECT_TRUE(r.unbalanced.empty());
  ASSERT_EQ(r.closed.size(), 60u);
  for (const auto& c : r.closed)
    EXPECT_EQ(std::make_pair(c.forward, c.backward), std::make_pair(1ul, 1ul));
}

}  // namespace
}  // namespace fp8audit
