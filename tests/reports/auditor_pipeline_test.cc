// Pipeline schedules on one process (1F1B: the forwards of later microbatches run before the
// backward of an earlier one): ranges that name their logical microbatch count in it wherever the
// schedule puts them; ranges without ids, or no markers at all, say the microbatches cannot be
// told apart instead of counting them as microbatches.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reports/auditor.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::TraceBuilder;

struct Pass {
  int microbatch;
  bool forward;
};

// 1F1B with `warmup` microbatches in flight: forwards 0..warmup-1, then backward i and forward
// i+warmup alternately, then the remaining backwards.
std::vector<Pass> OneFOneB(int microbatches, int warmup) {
  std::vector<Pass> order;
  for (int i = 0; i < warmup; ++i) order.push_back({i, true});
  for (int i = 0; i + warmup < microbatches; ++i) {
    order.push_back({i, false});
    order.push_back({i + warmup, true});
  }
  for (int i = microbatches - warmup; i < microbatches; ++i) order.push_back({i, false});
  return order;
}

enum class Marks { kIds, kNoIds, kNone };

// Each pass of `order` as the agent records it: a forward update on the training thread, a
// backward pass (BACKWARD_BEGIN, its update on an autograd thread, BACKWARD_END); in a range of
// its own unless `marks` is kNone (a range naming microbatch `id_base + i` with kIds). `updates`
// gives a pass other than one update: {microbatch, forward, count}.
struct Extra {
  int microbatch;
  bool forward;
  int count;
};
void Record(TraceBuilder* t, const std::vector<Pass>& order, Marks marks, uint64_t id_base = 0,
            const std::vector<Extra>& extra = {}) {
  for (const Pass& p : order) {
    int n = 1;
    for (const Extra& x : extra) {
      if (x.microbatch == p.microbatch && x.forward == p.forward) n = x.count;
    }
    if (marks != Marks::kNone) {
      v1::Event* e = t->Add(v1::MICROBATCH_BEGIN);
      e->set_source(v1::NVTX);
      e->set_detail("fp8audit.microbatch");
      if (marks == Marks::kIds) {
        e->set_microbatch_id(id_base + static_cast<uint64_t>(p.microbatch));
        e->set_detail("fp8audit.microbatch id=" + std::to_string(e->microbatch_id()));
      }
    }
    if (p.forward) {
      for (int i = 0; i < n; ++i) t->Forward();
    } else {
      t->BackwardBegin();
      for (int i = 0; i < n; ++i) t->Backward();
      t->BackwardEnd();
    }
    if (marks != Marks::kNone) t->End();
  }
}

std::string Notes(const v1::RankReport& r) {
  std::string all;
  for (const std::string& n : r.recording().notes()) all += n + "\n";
  return all;
}

TEST(AuditorPipeline, RangesNamingTheirMicrobatchCountEachOneOnceEachWay) {
  TraceBuilder t(-1, 1000, "nvtx");
  Record(&t, OneFOneB(8, 3), Marks::kIds);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const v1::MicrobatchResult& row = r.microbatches(i);
    EXPECT_EQ(row.microbatch_id(), static_cast<uint64_t>(i));  // closed in backward order
    EXPECT_EQ(row.forward_updates(), 1u) << i;
    EXPECT_EQ(row.backward_updates(), 1u) << i;
    EXPECT_EQ(row.verdict(), v1::PASS) << i;
  }
  EXPECT_EQ(r.violations_size(), 0);
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_EQ(Notes(r).find("cannot be told apart"), std::string::npos) << Notes(r);
}

TEST(AuditorPipeline, AnExtraUpdateInAnInterleavedMicrobatchFailsThatIdAlone) {
  TraceBuilder t(-1, 1000, "nvtx");
  // Microbatch 4's forward runs between backwards 1 and 2; its extra update is its own.
  Record(&t, OneFOneB(8, 3), Marks::kIds, 10, {{4, true, 2}});
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 8);
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    const bool bad = row.microbatch_id() == 14;
    EXPECT_EQ(row.forward_updates(), bad ? 2u : 1u) << row.microbatch_id();
    EXPECT_EQ(row.backward_updates(), 1u) << row.microbatch_id();
    EXPECT_EQ(row.verdict(), bad ? v1::FAIL : v1::PASS) << row.microbatch_id();
  }
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::FORWARD_COUNT);
  EXPECT_EQ(r.violations(0).message(),
            "microbatch 4 (id 14, step 0): 2 forward updates, expected 1");
}

TEST(AuditorPipeline, AMissingBackwardUpdateFailsTheRightIdToo) {
  TraceBuilder t(-1, 1000, "nvtx");
  Record(&t, OneFOneB(6, 2), Marks::kIds, 0, {{2, false, 0}});
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 6);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::BACKWARD_COUNT);
  EXPECT_NE(r.violations(0).message().find("microbatch 2 (id 2, step 0): 0 backward updates"),
            std::string::npos)
      << r.violations(0).message();
}

TEST(AuditorPipeline, IdsWithoutInterleavingCountAsRangesWithoutIds) {
  // One range per microbatch (forward and backward back to back), and forward and backward in
  // ranges of their own one after the other: with ids, the same rows as without.
  std::vector<Pass> back_to_back;
  for (int i = 0; i < 4; ++i) {
    back_to_back.push_back({i, true});
    back_to_back.push_back({i, false});
  }
  const std::vector<Extra> extra = {{1, true, 3}, {2, false, 2}};
  TraceBuilder keyed(-1, 1000, "nvtx");
  TraceBuilder plain(-1, 1000, "nvtx");
  for (int i = 0; i < 4; ++i) {
    for (TraceBuilder* t : {&keyed, &plain}) {
      v1::Event* e = t->Add(v1::MICROBATCH_BEGIN);
      e->set_source(v1::NVTX);
      if (t == &keyed) e->set_microbatch_id(static_cast<uint64_t>(i));
      Record(t, {{i, true}}, Marks::kNone, 0, extra);
      Record(t, {{i, false}}, Marks::kNone, 0, extra);
      t->End();
    }
  }
  keyed.Footer();
  plain.Footer();
  TraceBuilder split(-1, 1000, "nvtx");
  Record(&split, back_to_back, Marks::kIds, 0, extra);
  split.Footer();
  const v1::RankReport p = plain.Audit();
  for (const v1::RankReport& r : {keyed.Audit(), split.Audit()}) {
    ASSERT_EQ(r.microbatches_size(), p.microbatches_size());
    for (int i = 0; i < r.microbatches_size(); ++i) {
      EXPECT_EQ(r.microbatches(i).microbatch_id(), static_cast<uint64_t>(i));
      EXPECT_EQ(r.microbatches(i).forward_updates(), p.microbatches(i).forward_updates());
      EXPECT_EQ(r.microbatches(i).backward_updates(), p.microbatches(i).backward_updates());
      EXPECT_EQ(r.microbatches(i).verdict(), p.microbatches(i).verdict());
    }
    EXPECT_EQ(r.violations_size(), p.violations_size());
  }
  EXPECT_EQ(p.microbatches(1).verdict(), v1::FAIL);
  EXPECT_FALSE(p.microbatches(0).has_microbatch_id());
}

TEST(AuditorPipeline, IdsUsedAgainAfterAStepOrAFinishedBackwardAreNewMicrobatches) {
  TraceBuilder t(-1, 1000, "nvtx");
  Record(&t, OneFOneB(4, 2), Marks::kIds);
  t.Step();
  Record(&t, OneFOneB(4, 2), Marks::kIds);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r.microbatches(i).microbatch_id(), static_cast<uint64_t>(i % 4));
    EXPECT_EQ(r.microbatches(i).step(), i < 4 ? 0u : 1u);
    EXPECT_EQ(r.microbatches(i).verdict(), v1::PASS) << i;
  }
}

TEST(AuditorPipeline, RangesWithoutIdsAroundInterleavedPassesSayMicrobatchesCannotBeToldApart) {
  TraceBuilder t(-1, 1000, "nvtx");
  Record(&t, OneFOneB(6, 2), Marks::kNoIds);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 12);  // every range a microbatch: not per logical microbatch
  const std::string notes = Notes(r);
  // The backward ranges: 2 and 4 (after forwards 0 and 1), 6, 8, then the cool-down's 10, 11.
  EXPECT_NE(notes.find("microbatches cannot be told apart: 6 microbatch ranges (2, 4, 6, 8, 10, "
                       "...) hold a backward pass without its forward"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("fp8audit.megatron.mark_microbatches()"), std::string::npos) << notes;
  EXPECT_NE(notes.find("fp8audit.microbatch(id=i)"), std::string::npos) << notes;
  bool row_says = false;
  for (const std::string& e : r.microbatches(2).explanations()) {
    row_says = row_says || e.find("cannot be attributed") != std::string::npos;
  }
  EXPECT_TRUE(row_says);
}

TEST(AuditorPipeline, WithoutMarkersSeveralBackwardPassesInOneCutSayMicrobatchesCannotBeToldApart) {
  TraceBuilder t;
  Record(&t, OneFOneB(6, 3), Marks::kNone);
  t.Footer();
  const v1::RankReport r = t.Audit();
  // Forwards 0 and 1 alone (forward-only cuts), forward 2 with backward 0, forward i with
  // backward i-2, and the last cut holds backwards 4 and 5 as well.
  ASSERT_EQ(r.microbatches_size(), 6);
  EXPECT_EQ(r.microbatches(5).backward_updates(), 3u);
  const std::string notes = Notes(r);
  EXPECT_NE(notes.find("microbatches cannot be told apart: 1 cut (5) holds several backward "
                       "passes"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("fp8audit.megatron.mark_microbatches()"), std::string::npos) << notes;
}

TEST(AuditorPipeline, BackToBackMicrobatchesWithoutMarkersSayNothingOfPipelines) {
  std::vector<Pass> serial;
  for (int i = 0; i < 4; ++i) {
    serial.push_back({i, true});
    serial.push_back({i, false});
  }
  TraceBuilder t;
  Record(&t, serial, Marks::kNone, 0, {{2, false, 3}});
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 4);
  EXPECT_EQ(r.microbatches(2).verdict(), v1::FAIL);
  EXPECT_EQ(Notes(r).find("cannot be told apart"), std::string::npos) << Notes(r);
}

}  // namespace
}  // namespace fp8audit::reports
