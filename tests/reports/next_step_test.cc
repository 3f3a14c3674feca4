#include "reports/next_step.h"

#include <gtest/gtest.h>

#include <string>

#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

// A job whose microbatch 1 makes 2 backward updates; `te` the TE version its hook recorded.
v1::AuditReport FailingJob(const std::string& te, bool patched = false, bool hook = true) {
  TraceBuilder t(0, 4242, "nvtx");
  if (hook) t.Probes("auto", {"te-call", "python-hook"});
  if (!te.empty()) t.TeVersion(te);
  if (patched) t.TePatched(te, "fixed");
  t.MarkedMicrobatch().MarkedMicrobatch(1, 2).Footer();
  return Job({t.Audit()});
}

TEST(NextStep, AFailingTeJobIsToldToRerunUnderTheFixInEveryFormat) {
  const v1::AuditReport report = FailingJob("2.20.2");
  ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  EXPECT_TRUE(Contains(report.next_step(), "next: rerun under the fix, `fp8audit run --fix-te"))
      << report.next_step();
  EXPECT_FALSE(Contains(report.next_step(), "not one it was verified on"));
  const std::string text = RenderText(report, RenderOptions{});
  EXPECT_TRUE(Contains(text, ": FAIL\n" + report.next_step() + "\n")) << text;  // it ends there
  EXPECT_TRUE(Contains(RenderMarkdown(report, RenderOptions{}), "fp8audit.te.patch()"));
  EXPECT_TRUE(Contains(RenderHtml(report, RenderOptions{}), "id=\"next\""));
}

// A job whose only violation is a frozen scale (its counts right), with or without the fix.
v1::AuditReport FrozenJob(bool patched, bool extra_update = false) {
  TraceBuilder t(0, 4242, "nvtx");
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2");
  if (patched) t.TePatched("2.20.2", "fixed");
  t.MarkedMicrobatch();
  t.FrozenScale("Linear#2");
  if (extra_update) {
    t.MarkedMicrobatch(1, 2);
  } else {
    t.MarkedMicrobatch();
  }
  t.Footer();
  return Job({t.Audit()});
}

TEST(NextStep, AFrozenScaleAloneIsToldTheRemedyNotTheFix) {
  for (const bool patched : {false, true}) {
    const v1::AuditReport report = FrozenJob(patched);
    ASSERT_EQ(report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
    const std::string& line = report.next_step();
    EXPECT_TRUE(Contains(line, "keep each module under one recipe class")) << line;
    EXPECT_TRUE(Contains(line, "te.autocast(enabled=False)")) << line;
    EXPECT_FALSE(Contains(line, "rerun under the fix")) << line;
    EXPECT_FALSE(Contains(line, "the fix was in force")) << line;
  }
}

TEST(NextStep, AFrozenScaleBesideExtraUpdatesAddsTheRemedyToTheFix) {
  const std::string line = FrozenJob(false, true).next_step();
  EXPECT_TRUE(Contains(line, "next: rerun under the fix")) << line;
  EXPECT_TRUE(Contains(line, "keep each module under one recipe class")) << line;
}

TEST(NextStep, ATeThatSchedulesItsOwnBackwardUpdateIsToldTheScopeNotTheFix) {
  TraceBuilder t(0, 4242, "nvtx");
  t.Probes("auto", {"te-call", "python-hook"}).TeVersion("2.20.2", "te-3456");
  t.MarkedMicrobatch(1, 2).Footer();
  const std::string line = Job({t.Audit()}).next_step();
  EXPECT_TRUE(Contains(line, "with te.quantization_backward_scope():")) << line;
  EXPECT_FALSE(Contains(line, "--fix-te")) << line;
}

TEST(NextStep, AnUnverifiedTeReleaseIsSaidToBeRefused) {
  EXPECT_TRUE(Contains(FailingJob("2.15.0").next_step(),
                       "this job's TE 2.15.0 is not one it was verified on"));
}

TEST(NextStep, EveryReleaseTheFixWasVerifiedOnIsToldToRerunUnderIt) {
  for (const std::string te : {"2.14.1", "2.16.0", "2.17.1", "2.18.0", "2.19.0", "2.20.2"}) {
    const std::string line = FailingJob(te).next_step();
    EXPECT_TRUE(Contains(line, "next: rerun under the fix")) << line;
    EXPECT_FALSE(Contains(line, "not one it was verified on")) << line;
    EXPECT_TRUE(Contains(line, "it patches Transformer Engine " + te + ")")) << line;
  }
}

TEST(NextStep, WithoutTeThereIsNothingToPatchAndUnderTheFixTheTracesAreToBeReported) {
  EXPECT_TRUE(Contains(FailingJob("").next_step(), "nothing for --fix-te to patch"));
  // No hook, no version: TE may be there unseen.
  EXPECT_TRUE(Contains(FailingJob("", false, false).next_step(),
                       "version was not recorded (no Python hook in these traces): where the job "
                       "runs TE from Python, rerun under the fix"));
  EXPECT_TRUE(Contains(FailingJob("2.20.2", true).next_step(), "the fix was in force"));
}

TEST(NextStep, APassingJobHasNone) {
  TraceBuilder t(0, 4242, "nvtx");
  t.TeVersion("2.20.2").MarkedMicrobatch().Footer();
  const v1::AuditReport report = Job({t.Audit()});
  EXPECT_EQ(report.next_step(), "");
  EXPECT_FALSE(Contains(RenderText(report, RenderOptions{}), "next:"));
}

}  // namespace
}  // namespace fp8audit::reports
