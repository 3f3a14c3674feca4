// The extra updates by place (issue 35 item 2's per-module table): where each extra update
// happened, whether it was harmful or wasted as far as the trace can tell, and every format
// showing the table.
#include "reports/extra_places.h"

#include <gtest/gtest.h>

#include <string>

#include "reports/render.h"
#include "reports/segmentation.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

TEST(ExtraPlaces, AModuleThatRanMakesAnUpdateHarmfulNoneWastedUnseenUnknown) {
  EXPECT_EQ(EffectOf(true, false), Effect::kHarmful);
  EXPECT_EQ(EffectOf(true, true), Effect::kHarmful);
  EXPECT_EQ(EffectOf(false, true), Effect::kWasted);
  EXPECT_EQ(EffectOf(false, false), Effect::kUnknown);
}

TEST(ExtraPlaces, MostFirstAndPlacesPastTheLimitShareOneRow) {
  ExtraPlaces places;
  places.Add("a", kFwd, 1, false, Effect::kWasted);
  places.Add("b", kBwd, 3, true, Effect::kHarmful);
  for (size_t i = 0; i < ExtraPlaces::kMaxPlaces; ++i) {
    places.Add("p" + std::to_string(i), kFwd, 1, false, Effect::kUnknown);
  }
  v1::RankReport r;
  places.WriteTo(&r);
  ASSERT_EQ(r.extra_updates_at_size(), static_cast<int>(ExtraPlaces::kMaxPlaces) + 1);
  EXPECT_EQ(r.extra_updates_at(0).place(), "b");
  EXPECT_EQ(r.extra_updates_at(0).backward(), 3u);
  EXPECT_EQ(r.extra_updates_at(0).in_recompute(), 3u);
  EXPECT_EQ(r.extra_updates_at(0).harmful(), 3u);
  EXPECT_EQ(r.extra_updates_at(1).place(), "a");  // ties keep the order first seen
  EXPECT_EQ(r.extra_updates_at(1).wasted(), 1u);
  const v1::ExtraUpdatesAt& other = r.extra_updates_at(r.extra_updates_at_size() - 1);
  EXPECT_EQ(other.place(), ExtraPlaces::kOtherPlaces);
  EXPECT_EQ(other.forward(), 2u);  // p30, p31
}

// Module markers name each forward: an update right after another (no module between) is wasted,
// one after a module ran is harmful; backward modules are not marked, so backward extras are
// neither.
v1::RankReport MarkedJob() {
  TraceBuilder t(0, 1000, "nvtx");
  for (int mb = 0; mb < 2; ++mb) {
    t.Begin().Module(true, "fc1").Forward().Forward().Module(true, "fc2").Forward();
    t.BackwardBegin().Backward().Backward().BackwardEnd().End();
  }
  return t.Footer().Audit();
}

TEST(ExtraPlaces, EachExtraUpdateCountsAtItsModuleHarmfulOrWastedByWhatRanSince) {
  const v1::RankReport r = MarkedJob();
  ASSERT_EQ(r.extra_updates_at_size(), 2) << r.DebugString();
  const v1::ExtraUpdatesAt& fc2 = r.extra_updates_at(0);
  EXPECT_EQ(fc2.place(), "fc2");  // 2 forward + 2 backward (the backward ones follow it)
  EXPECT_EQ(fc2.forward(), 2u);
  EXPECT_EQ(fc2.backward(), 2u);
  EXPECT_EQ(fc2.harmful(), 2u);
  EXPECT_EQ(fc2.wasted(), 0u);
  const v1::ExtraUpdatesAt& fc1 = r.extra_updates_at(1);
  EXPECT_EQ(fc1.place(), "fc1");
  EXPECT_EQ(fc1.forward(), 2u);
  EXPECT_EQ(fc1.wasted(), 2u);
  EXPECT_EQ(fc1.harmful(), 0u);
}

TEST(ExtraPlaces, ARecomputesForwardUpdateAfterItsModulesIsHarmfulAtTheCheckpointedFunction) {
  TraceBuilder t(0, 1000, "nvtx");
  const uint64_t bw = TraceBuilder::kAutogradThread;
  const std::string fn = "models/llama.py:40 in Block.forward (checkpointed)";
  t.Begin().Forward().BackwardBegin().CheckpointEnter(1, 2, v1::REENTRANT, bw);
  t.Recompute("Linear#1", v1::FP8_ON, v1::FP8_ON).Site(fn, bw);
  t.Update(v1::UPDATE_FORWARD, 0, bw).Site(fn, bw).Update(v1::UPDATE_FORWARD, 0, bw);
  t.CheckpointExit(1, bw).Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.extra_updates_at_size(), 1) << r.DebugString();
  const v1::ExtraUpdatesAt& at = r.extra_updates_at(0);
  EXPECT_EQ(at.place(), fn);
  EXPECT_EQ(at.forward(), 2u);
  EXPECT_EQ(at.in_recompute(), 2u);
  EXPECT_EQ(at.harmful(), 1u);  // the first, after Linear#1's recompute in FP8
  EXPECT_EQ(at.wasted(), 1u);   // the nested autocast's, right after it
}

TEST(ExtraPlaces, APassingTraceHasNoTable) {
  TraceBuilder t(0, 1000, "nvtx");
  t.MarkedMicrobatch(1, 1).Footer();
  const v1::RankReport r = t.Audit();
  EXPECT_EQ(r.extra_updates_at_size(), 0);
  std::string out, error;
  ASSERT_TRUE(Render(Job({r}), Format::kText, RenderOptions{}, &out, &error));
  EXPECT_FALSE(Contains(out, "extra updates by place")) << out;
}

TEST(ExtraPlaces, EveryFormatShowsTheTable) {
  const v1::AuditReport job = Job({MarkedJob()});
  const std::pair<Format, std::string> expected[] = {
      {Format::kText, "  2         2             0        2       0         2  fc2\n"},
      {Format::kMarkdown, "| 2 | 2 | 0 | 2 | 0 | 2 | fc2 |"},
      {Format::kJson, "\"place\": \"fc2\""},
      {Format::kJunit,
       "extra updates at fc1: 2 forward, 0 backward, 0 in recompute, 0 harmful, "
       "2 wasted"},
      {Format::kHtml, "<td class=\"n\">2</td><td class=\"n\">0</td><td>fc1</td>"},
  };
  for (const auto& [format, text] : expected) {
    std::string out, error;
    ASSERT_TRUE(Render(job, format, RenderOptions{}, &out, &error)) << error;
    EXPECT_TRUE(Contains(out, text)) << static_cast<int>(format) << ":\n" << out;
  }
}

}  // namespace
}  // namespace fp8audit::reports
