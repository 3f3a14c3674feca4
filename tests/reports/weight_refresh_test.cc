#include "reports/weight_refresh.h"

#include <gtest/gtest.h>

#include <string>

#include "fp8audit/nvtx_grammar.h"
#include "reports/auditor.h"
#include "reports/event_text.h"
#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

constexpr char kTeCheckpoint[] = "transformer_engine.checkpoint";
constexpr char kTorchCheckpoint[] = "torch.utils.checkpoint";

v1::Event Refresh(const std::string& module, const std::string& scale,
                  const std::string& checkpoint) {
  v1::Event e;
  e.set_kind(v1::WEIGHT_REFRESH);
  e.set_module(module);
  e.set_context(scale);
  e.set_detail(checkpoint);
  return e;
}

std::string Lines(const google::protobuf::RepeatedPtrField<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

TEST(WeightRefresh, ForwardScaleRefreshesAreWastedEvenAfterAForwardUpdate) {
  WeightRefresh r;
  r.Add(Refresh("Linear#1", nvtx::kScaleForward, kTeCheckpoint), /*forward_updated=*/true);
  r.Add(Refresh("Linear#2", nvtx::kScaleForward, ""), /*forward_updated=*/false);
  EXPECT_EQ(r.refreshes(), 2u);
  EXPECT_EQ(r.harmful(), 0u);
  EXPECT_EQ(r.wasted(), 2u);
  EXPECT_EQ(r.ViolationMessage(), "");
  EXPECT_EQ(r.Explanation(), "");
  EXPECT_EQ(r.WastedExplanation(),
            "2 weight caches re-quantized in recompute with their forward's values (wasted: one "
            "quantize kernel each; the checkpoint replayed is_first_microbatch=True): Linear#1 "
            "(transformer_engine.checkpoint), Linear#2 (unknown checkpoint)");
}

TEST(WeightRefresh, LiveRefreshesAreHarmfulOnlyAfterAForwardUpdateInTheMicrobatch) {
  WeightRefresh r;
  r.Add(Refresh("Linear#1", nvtx::kScaleLive, kTorchCheckpoint), /*forward_updated=*/false);
  EXPECT_EQ(r.harmful(), 0u);
  EXPECT_EQ(r.WastedExplanation(),
            "1 weight cache re-quantized in recompute with its forward's values (wasted: one "
            "quantize kernel; the checkpoint replayed is_first_microbatch=True): Linear#1 "
            "(torch.utils.checkpoint)");
  r.Add(Refresh("Linear#2", nvtx::kScaleLive, kTorchCheckpoint), /*forward_updated=*/true);
  EXPECT_EQ(r.refreshes(), 2u);
  EXPECT_EQ(r.harmful(), 1u);
  EXPECT_EQ(r.wasted(), 1u);
  EXPECT_EQ(r.ViolationMessage(),
            "1 weight cache re-quantized in recompute after this microbatch's forward update, "
            "under the scale of that moment (harmful where the update moved it: the backward then "
            "uses a weight quantized otherwise than the forward's): Linear#2 "
            "(torch.utils.checkpoint)");
  EXPECT_TRUE(Contains(r.Explanation(),
                       "Transformer Engine's own checkpoint, or `fp8audit run --fix-te`, "
                       "recomputes under the forward's scales"))
      << r.Explanation();
}

TEST(WeightRefresh, DescribesTheFirstRefreshesAndCountsTheRest) {
  WeightRefresh r;
  for (int i = 0; i < 20; ++i) r.Add(Refresh("m", nvtx::kScaleLive, "c"), true);
  EXPECT_TRUE(Contains(r.ViolationMessage(), "20 weight caches")) << r.ViolationMessage();
  EXPECT_TRUE(Contains(r.ViolationMessage(), "m (c), and 12 more")) << r.ViolationMessage();
  r.Reset();
  EXPECT_EQ(r.refreshes(), 0u);
  EXPECT_EQ(r.ViolationMessage(), "");
}

TEST(WeightRefresh, TheRunsNoteCountsWastedRefreshesAndTheirMicrobatches) {
  EXPECT_EQ(WastedRefreshesNote(0, 0), "");
  EXPECT_EQ(WastedRefreshesNote(12, 4),
            "weight caches: 12 re-quantized in recompute with unchanged values (wasted: a quantize "
            "kernel each) over 4 microbatches");
  EXPECT_EQ(WastedRefreshesNote(1, 1),
            "weight caches: 1 re-quantized in recompute with unchanged values (wasted: a quantize "
            "kernel each) over 1 microbatch");
}

TEST(EventText, ARefreshLineNamesItsModuleScaleAndCheckpoint) {
  v1::Event e = Refresh("Linear#1", nvtx::kScaleLive, kTorchCheckpoint);
  e.set_source(v1::PYTHON_HOOK);
  e.set_pass(v1::BACKWARD);
  e.set_thread_id(7);
  EXPECT_EQ(EventLine(e, 0),
            "t=0.000ms thread 7 backward python-hook weight cache refresh module Linear#1 scale "
            "live torch.utils.checkpoint");
  EXPECT_EQ(ViolationKindName(v1::Violation::RECOMPUTE_WEIGHT_REFRESH), "recompute weight refresh");
}

// TE's own checkpoint: the forward update after the forward, then the recompute in backward
// replays is_first_microbatch=True and re-quantizes each weight under the forward's scales
// (LayerNormMLP: two weights).
void TeCheckpointMicrobatch(TraceBuilder* t, int refreshes) {
  t->Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0).BackwardBegin();
  t->Recompute("LayerNormMLP#1", v1::FP8_ON, v1::FP8_ON);
  for (int i = 0; i < refreshes; ++i) {
    t->Refresh("LayerNormMLP#1", nvtx::kScaleForward, kTeCheckpoint);
  }
  t->Backward().BackwardEnd().End();
}

TEST(Auditor, ForwardScaleRefreshesPassWithAnExplanationAndTheirCounts) {
  TraceBuilder t(0, 1000, "nvtx");
  TeCheckpointMicrobatch(&t, 2);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  const auto& row = r.microbatches(0);
  EXPECT_EQ(row.verdict(), v1::PASS);
  EXPECT_EQ(row.weight_refreshes(), 2u);
  EXPECT_EQ(row.weight_refreshes_harmful(), 0u);
  const std::string why = Lines(row.explanations());
  EXPECT_TRUE(Contains(why,
                       "2 weight caches re-quantized in recompute with their forward's values "
                       "(wasted: one quantize kernel each; the checkpoint replayed "
                       "is_first_microbatch=True): LayerNormMLP#1 (transformer_engine.checkpoint), "
                       "LayerNormMLP#1 (transformer_engine.checkpoint)\n"))
      << why;
  EXPECT_EQ(r.violations_size(), 0);
  EXPECT_EQ(r.verdict(), v1::PASS);
  EXPECT_EQ(r.recording().weight_refreshes(), 2u);
  EXPECT_TRUE(Contains(Lines(r.recording().notes()),
                       "weight caches: 2 re-quantized in recompute with unchanged values"))
      << Lines(r.recording().notes());
}

// torch.utils.checkpoint under DelayedScaling: the forward update moved the scales, then the
// recompute re-quantized the weights under the moved ones.
void TorchCheckpointMicrobatch(TraceBuilder* t) {
  t->Begin().Autocast(true, 1).Module(true, "fc1").Forward().Autocast(false, 0).BackwardBegin();
  t->Refresh("Linear#1", nvtx::kScaleLive, kTorchCheckpoint);
  t->Refresh("Linear#2", nvtx::kScaleLive, kTorchCheckpoint);
  t->Backward().BackwardEnd().End();
}

TEST(Auditor, ALiveRefreshAfterAForwardUpdateFailsTheMicrobatchWithItsViolation) {
  TraceBuilder t(0, 1000, "nvtx");
  TorchCheckpointMicrobatch(&t);
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  const auto& row = r.microbatches(0);
  EXPECT_EQ(row.forward_updates(), 1u);
  EXPECT_EQ(row.backward_updates(), 1u);
  EXPECT_EQ(row.weight_refreshes(), 2u);
  EXPECT_EQ(row.weight_refreshes_harmful(), 2u);
  EXPECT_EQ(row.verdict(), v1::FAIL);
  ASSERT_EQ(r.violations_size(), 1);
  const v1::Violation& v = r.violations(0);
  EXPECT_EQ(v.kind(), v1::Violation::RECOMPUTE_WEIGHT_REFRESH);
  const std::string cause =
      "2 weight caches re-quantized in recompute after this microbatch's forward update, under "
      "the scale of that moment (harmful where the update moved it: the backward then uses a "
      "weight quantized otherwise than the forward's): Linear#1 (torch.utils.checkpoint), "
      "Linear#2 (torch.utils.checkpoint)";
  EXPECT_EQ(v.cause(), cause);
  EXPECT_EQ(v.message(), "microbatch 0 (step 0): " + cause);
  ASSERT_EQ(r.findings_size(), 1);
  EXPECT_EQ(r.findings(0).kind(), v1::Violation::RECOMPUTE_WEIGHT_REFRESH);
  EXPECT_EQ(r.findings(0).cause(), cause);
  ASSERT_EQ(r.findings(0).explanations_size(), 1);
  EXPECT_TRUE(
      Contains(r.findings(0).explanations(0), "weight caches re-quantized after a forward update"));
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_EQ(r.confirmed_violations(), 1u);
}

// The backward inside the autocast (`with fp8_autocast(): model(x).sum().backward()`): the forward
// update comes at the autocast's exit, after the backward, so the recompute quantized under the
// forward's scales. A forward update of the microbatch before does not count.
TEST(Auditor, ALiveRefreshWithNoForwardUpdateBeforeItInItsMicrobatchIsWasted) {
  TraceBuilder t(0, 1000, "nvtx");
  t.MarkedMicrobatch();
  t.Begin().Autocast(true, 1).Module(true, "fc1").BackwardBegin();
  t.Refresh("Linear#1", nvtx::kScaleLive, kTorchCheckpoint).Backward().BackwardEnd();
  t.Forward().Autocast(false, 0).End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  const auto& row = r.microbatches(1);
  EXPECT_EQ(row.forward_updates(), 1u);
  EXPECT_EQ(row.weight_refreshes(), 1u);
  EXPECT_EQ(row.weight_refreshes_harmful(), 0u);
  EXPECT_EQ(row.verdict(), v1::PASS);
  EXPECT_TRUE(Contains(Lines(row.explanations()),
                       "1 weight cache re-quantized in recompute with "
                       "its forward's values (wasted"))
      << Lines(row.explanations());
  EXPECT_EQ(r.violations_size(), 0);
  EXPECT_EQ(r.verdict(), v1::PASS);
}

// Past fold_beyond, rows fold only into a row with the same refresh counts.
TEST(Auditor, RowsWithDifferentRefreshCountsAreNotFolded) {
  TraceBuilder t(0, 1000, "nvtx");
  for (int refreshes : {0, 0, 1, 1, 2}) TeCheckpointMicrobatch(&t, refreshes);
  t.Footer();
  AuditorOptions options;
  options.max_rows = 0;
  options.fold_beyond = 1;
  Auditor a(options);
  t.Feed(&a);
  const v1::RankReport& r = a.report();
  ASSERT_EQ(r.microbatches_size(), 3) << r.DebugString();  // 0-1, 2-3, 4
  EXPECT_EQ(r.microbatches(0).through_index(), 1u);
  EXPECT_EQ(r.microbatches(1).index(), 2u);
  EXPECT_EQ(r.microbatches(1).weight_refreshes(), 1u);
  EXPECT_EQ(r.microbatches(1).through_index(), 3u);
  EXPECT_EQ(r.microbatches(2).index(), 4u);
  EXPECT_EQ(r.microbatches(2).weight_refreshes(), 2u);
  EXPECT_FALSE(r.microbatches(2).has_through_index());
}

TEST(RenderText, ShowsTheRunsWastedRefreshesAndTheHarmfulOnesAsAFinding) {
  TraceBuilder t(0, 1000, "nvtx");
  TeCheckpointMicrobatch(&t, 3);
  TorchCheckpointMicrobatch(&t);
  t.Footer();
  const v1::AuditReport report = Job({t.Audit()});
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text,
                       "note      weight caches: 3 re-quantized in recompute with unchanged values "
                       "(wasted: a quantize kernel each) over 1 microbatch\n"))
      << text;
  EXPECT_TRUE(
      Contains(text,
               "microbatch 1 (step 0): 2 weight caches re-quantized in recompute after this "
               "microbatch's forward update, under the scale of that moment (harmful "
               "where the update moved it: the backward then uses a weight quantized "
               "otherwise than the forward's): Linear#1 (torch.utils.checkpoint), "
               "Linear#2 (torch.utils.checkpoint) [recompute weight refresh]\n"))
      << text;
  EXPECT_TRUE(Contains(text, "    weight caches re-quantized after a forward update: ")) << text;
  RenderOptions verbose;
  verbose.verbose = true;
  const std::string every = RenderText(report, verbose);
  EXPECT_TRUE(Contains(every, "Linear#2 (torch.utils.checkpoint) [recompute weight refresh]\n"))
      << every;
  EXPECT_FALSE(Contains(every, "violations are shown")) << every;  // the one violation is

  std::string json;
  std::string error;
  ASSERT_TRUE(Render(report, Format::kJson, RenderOptions{}, &json, &error)) << error;
  EXPECT_TRUE(Contains(json, "\"weight_refreshes_harmful\": 2")) << json;
  EXPECT_TRUE(Contains(json, "\"kind\": \"RECOMPUTE_WEIGHT_REFRESH\"")) << json;
}

}  // namespace
}  // namespace fp8audit::reports
