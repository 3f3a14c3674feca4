// The auditor with several probes: only UPDATE_* events count; cross-checks and facts are neutral.
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
