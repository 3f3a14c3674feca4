// `fp8audit run` with the real agent over a job one of whose processes starts a program without
// it (issue 34 item 2): named, and the audit incomplete (exit 2), never a pass.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/cli/cli_fixture.h"
#include "tests/reports/report_fixtures.h"

namespace fp8audit {
namespace {

#if defined(FP8AUDIT_REAL_AGENT) && defined(FP8AUDIT_NVTX_EMITTER)

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Result;
using testing::Contains;
using ChildrenCli = CliTest;

using cli_testing::RealAgentEnv;

// `env -i` execs the worker with an empty environment: no LD_PRELOAD, so no agent. The worker's
// three microbatches pass when audited; unaudited, the run cannot say so.
TEST_F(ChildrenCli, AWorkerStartedWithACleanedEnvironmentIsNamedAndTheAuditIsIncomplete) {
  const std::string emitter = FP8AUDIT_NVTX_EMITTER;
  const Result r = Fp8audit({"run", "--out", Path("out"), "--", "sh", "-c",
                             emitter + " basic; env -i " + emitter + " basic"},
                            RealAgentEnv());
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "started " + emitter +
                                  " without the agent (the environment it was "
                                  "given names no agent"))
      << Describe(r);
  EXPECT_TRUE(Contains(r.err, "started a program without the agent")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, ": INCOMPLETE")) << Describe(r);

  const Result check = Fp8audit({"check", Path("out")});
  EXPECT_EQ(check.code, 2) << Describe(check);
}

TEST_F(ChildrenCli, TheSameWorkerWithTheJobsEnvironmentPasses) {
  const std::string emitter = FP8AUDIT_NVTX_EMITTER;
  const Result r = Fp8audit({"run", "--out", Path("out"), "--", "sh", "-c",
                             emitter + " basic; env FOO=1 " + emitter + " basic"},
                            RealAgentEnv());
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "without the agent")) << Describe(r);
}

// FP8AUDIT_DISABLE=1 in the worker's environment turns the agent off there on purpose.
TEST_F(ChildrenCli, AWorkerTheJobTurnsTheAgentOffForIsNotReported) {
  const std::string emitter = FP8AUDIT_NVTX_EMITTER;
  const Result r = Fp8audit({"run", "--out", Path("out"), "--", "sh", "-c",
                             emitter + " basic; env -i FP8AUDIT_DISABLE=1 " + emitter + " basic"},
                            RealAgentEnv());
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "without the agent")) << Describe(r);
}

// The job moves its own trace while it runs (issue 34 item 12): the agent says so at the end, in
// one line; the run, finding no trace where it looks, is incomplete (2), never a pass.
TEST_F(ChildrenCli, ATraceTheJobMovesAwayIsSaidByTheAgentAndTheRunIsIncomplete) {
  const std::string out = Path("out"), moved = Path("moved"), go = Path("go");
  const std::string script =
      std::string(FP8AUDIT_NVTX_EMITTER) + " hold " + go + " > /dev/null & pid=$!; until ls " +
      out + "/*.fp8trace >/dev/null 2>&1; do sleep 0.05; done; mkdir " + moved + "; mv " + out +
      "/*.fp8trace " + moved + "/; touch " + go + "; wait $pid";
  const Result r = Fp8audit({"run", "--out", out, "--", "sh", "-c", script}, RealAgentEnv());
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, " was moved or removed while the job ran")) << Describe(r);
}

#endif

}  // namespace
}  // namespace fp8audit
