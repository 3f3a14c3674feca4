// `fp8audit report PATH --baseline BASE` (issue 35): this run against an earlier one, per
// microbatch; 3 where it is worse, 0 where it is not, 2 where either cannot be judged.
#include <gtest/gtest.h>

#include <filesystem>
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

}  // namespace
}  // namespace fp8audit
