// reports/trace_runs.h: traces grouped by the run that wrote them, and one run chosen.
#include "reports/trace_runs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::reports {
namespace {

using testing::TraceBuilder;

class TraceRunsTest : public ::testing::Test {
 protected:
  // A passing trace of run `run_id` started at `start_s` seconds after the epoch.
  std::string Trace(const std::string& name, const std::string& run_id, uint64_t start_s) {
    TraceBuilder t(-1, 1000);
    t.header()->set_run_id(run_id);
    t.header()->set_start_unix_ns(start_s * 1000000000u);
    t.MarkedMicrobatch();
    const std::string path = tmp_.Path(name);
    EXPECT_TRUE(t.Write(path));
    return path;
  }

  testutil::TempDir tmp_{"fp8audit-runs-"};
};

TEST_F(TraceRunsTest, LatestReadsTheRunStartedLastAndSaysWhichAndWhatElseIsThere) {
  const std::string a1 = Trace("a1.fp8trace", "host-11-aaaa", 100);
  const std::string b = Trace("b.fp8trace", "host-22-bbbb", 200);
  const std::string a2 = Trace("a2.fp8trace", "host-11-aaaa", 300);  // run a started at 100
  std::vector<std::string> chosen, notes;
  std::string error;
  ASSERT_TRUE(SelectRun({a1, b, a2}, "latest", &chosen, &notes, &error)) << error;
  EXPECT_EQ(chosen, std::vector<std::string>{b});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "these traces are of 2 runs: reading the latest, host-22-bbbb (started 1970-01-01 "
            "00:03:20 UTC, 1 trace); the others: host-11-aaaa (started 1970-01-01 00:01:40 UTC, 2 "
            "traces) (choose one with --run ID, every trace with --run all)");
}

TEST_F(TraceRunsTest, OneRunIsReadWholeWithoutANote) {
  const std::string a1 = Trace("a1.fp8trace", "r", 100);
  const std::string a2 = Trace("a2.fp8trace", "r", 200);
  std::vector<std::string> chosen, notes;
  std::string error;
  ASSERT_TRUE(SelectRun({a1, a2}, "latest", &chosen, &notes, &error));
  EXPECT_EQ(chosen, (std::vector<std::string>{a1, a2}));
  EXPECT_TRUE(notes.empty());
}

TEST_F(TraceRunsTest, AnIdOrItsUniqueStartChoosesARunAndAllReadsEverything) {
  const std::string a = Trace("a.fp8trace", "host-11-aaaa", 100);
  const std::string b = Trace("b.fp8trace", "host-12-bbbb", 200);
  std::vector<std::string> chosen, notes;
  std::string error;
  ASSERT_TRUE(SelectRun({a, b}, "host-11", &chosen, &notes, &error)) << error;
  EXPECT_EQ(chosen, std::vector<std::string>{a});
  ASSERT_TRUE(SelectRun({a, b}, "host-12-bbbb", &chosen, &notes, &error)) << error;
  EXPECT_EQ(chosen, std::vector<std::string>{b});
  ASSERT_TRUE(SelectRun({a, b}, "all", &chosen, &notes, &error));
  EXPECT_EQ(chosen, (std::vector<std::string>{a, b}));
  EXPECT_TRUE(notes.empty());
}

TEST_F(TraceRunsTest, AnIdThatNamesNoRunOrSeveralIsRefusedNamingTheRuns) {
  const std::string a = Trace("a.fp8trace", "host-11-aaaa", 100);
  const std::string b = Trace("b.fp8trace", "host-12-bbbb", 200);
  std::vector<std::string> chosen, notes;
  std::string error;
  EXPECT_FALSE(SelectRun({a, b}, "nope", &chosen, &notes, &error));
  EXPECT_EQ(error.rfind("no run nope in these traces; their runs: host-12-bbbb (started", 0), 0u)
      << error;
  EXPECT_FALSE(SelectRun({a, b}, "host-1", &chosen, &notes, &error));
  EXPECT_EQ(error.rfind("more than one run starts with host-1", 0), 0u) << error;
}

TEST_F(TraceRunsTest, AFileWithoutAReadableHeaderIsKeptInAnyChoice) {
  const std::string a = Trace("a.fp8trace", "old", 100);
  const std::string b = Trace("b.fp8trace", "new", 200);
  const std::string junk = tmp_.Path("junk.fp8trace");
  std::ofstream(junk) << "not a trace";
  std::vector<std::string> chosen, notes;
  std::string error;
  ASSERT_TRUE(SelectRun({a, junk, b}, "latest", &chosen, &notes, &error));
  EXPECT_EQ(chosen, (std::vector<std::string>{junk, b}));
}

}  // namespace
}  // namespace fp8audit::reports
