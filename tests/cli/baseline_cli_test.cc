// `fp8audit report PATH --baseline BASE` (issue 35): this run against an earlier one, per
// microbatch; 3 where it is worse, 0 where it is not, 2 where either cannot be judged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_fixture.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Result;
using testing::Contains;
using testing::TraceBuilder;

class BaselineCliTest : public CliTest {
 protected:
  // DIR/t.fp8trace: microbatches making (forward, 1) updates each, 1/1 expected.
  std::string Run(const std::string& dir, std::initializer_list<int> forwards) {
    std::filesystem::create_directories(Path(dir));
    TraceBuilder t;
    for (int f : forwards) t.MarkedMicrobatch(f, 1);
    t.Footer();
    WriteTrace(dir + "/t.fp8trace", t);
    return Path(dir);
  }
};

TEST_F(BaselineCliTest, ARunNearerTheExpectedUpdatesPassesAgainstItsBaseline) {
  const std::string before = Run("before", {3, 3, 1});
  const std::string after = Run("after", {1, 1, 1});
  const Result r = Fp8audit({"report", after, "--baseline", before});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "fp8audit report: compared with a baseline")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "     -         0-1       3/1       1/1       1/1  better"))
      << Describe(r);
  EXPECT_TRUE(
      Contains(r.out, "microbatches: 2 better, 0 worse, 1 as before; failing: 0 (baseline 2)"))
      << Describe(r);
}

TEST_F(BaselineCliTest, ARunFurtherFromTheExpectedUpdatesExits3EvenWhereBothFail) {
  const std::string before = Run("before", {2, 2});
  const std::string after = Run("after", {2, 4});
  const Result r = Fp8audit({"report", after, "--baseline", before});
  EXPECT_EQ(r.code, 3) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "WORSE than the baseline")) << Describe(r);
  EXPECT_EQ(Fp8audit({"report", after, "--baseline", before, "--exit-zero"}).code, 0);
}

TEST_F(BaselineCliTest, OtherFormatsAndABaselineThatIsTheSameTracesAreRefused) {
  const std::string before = Run("before", {1});
  const std::string after = Run("after", {1});
  const Result json = Fp8audit({"report", after, "--baseline", before, "--format", "json"});
  EXPECT_EQ(json.code, 2) << Describe(json);
  EXPECT_TRUE(Contains(json.err, "--baseline compares in text only")) << Describe(json);
  const Result same = Fp8audit({"report", after, "--baseline", after});
  EXPECT_EQ(same.code, 2) << Describe(same);
  EXPECT_TRUE(Contains(same.err, "is in both the baseline and the traces compared"))
      << Describe(same);
}

// -o is refused where it would replace a baseline trace, as it is for a trace compared: one line,
// exit 2, before anything is read or written.
TEST_F(BaselineCliTest, AReportOverABaselineTraceIsRefusedAndTheBaselineKept) {
  const std::string before = Run("before", {3, 3});
  const std::string after = Run("after", {1, 1});
  const std::string base_trace = before + "/t.fp8trace";
  const std::string bytes = cli_testing::Slurp(base_trace);
  for (const std::string& base : {base_trace, before}) {
    const Result r = Fp8audit({"report", after, "--baseline", base, "-o", base_trace});
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(r.err, "fp8audit report: -o " + base_trace + " is the baseline trace " + base_trace +
                         " it reads: name another file for the report\n")
        << Describe(r);
    EXPECT_EQ(r.out, "") << Describe(r);
    EXPECT_EQ(cli_testing::Slurp(base_trace), bytes);
  }
  // Another name for it (a hard link): the same file.
  std::filesystem::create_hard_link(base_trace, Path("link.fp8trace"));
  const Result linked =
      Fp8audit({"report", after, "--baseline", Path("link.fp8trace"), "-o", base_trace});
  EXPECT_EQ(linked.code, 2) << Describe(linked);
  EXPECT_TRUE(Contains(linked.err, "it reads: name another file for the report"))
      << Describe(linked);
  EXPECT_EQ(cli_testing::Slurp(base_trace), bytes);
}

// --exit-zero turns only the verdict's 3 into 0: a baseline or traces that cannot be judged still
// exit 2, with or without -o.
TEST_F(BaselineCliTest, ExitZeroStillExits2WhereEitherAuditIsIncomplete) {
  const std::string after = Run("after", {1, 1});
  std::filesystem::create_directories(Path("garbage"));
  std::ofstream(Path("garbage/g.fp8trace"), std::ios::binary) << "not a trace at all";
  std::ofstream(Path("empty.fp8trace"), std::ios::binary);
  for (const std::string& bad : {Path("garbage/g.fp8trace"), Path("empty.fp8trace")}) {
    const Result base = Fp8audit({"report", after, "--baseline", bad, "--exit-zero"});
    EXPECT_EQ(base.code, 2) << Describe(base);
    const Result now = Fp8audit({"report", bad, "--baseline", after, "--exit-zero"});
    EXPECT_EQ(now.code, 2) << Describe(now);
    const Result out =
        Fp8audit({"report", after, "--baseline", bad, "--exit-zero", "-o", Path("cmp.txt")});
    EXPECT_EQ(out.code, 2) << Describe(out);
    EXPECT_TRUE(std::filesystem::exists(Path("cmp.txt"))) << Describe(out);  // still written
  }
}

}  // namespace
}  // namespace fp8audit
