// `fp8audit run`'s heartbeat: when it beats, what one line says, and what it counts, with the
// clock and the trace directory given (no timing).
#include "cli/heartbeat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSecond = 1000000000;

TEST(Heartbeat, BeatsOnlyOnATerminalWithAnIntervalAndWithoutQuiet) {
  EXPECT_TRUE(HeartbeatWanted(60, 0, true));
  EXPECT_FALSE(HeartbeatWanted(60, 0, false));  // a log file or a pipe: never
  EXPECT_FALSE(HeartbeatWanted(60, 1, true));   // --quiet
  EXPECT_FALSE(HeartbeatWanted(60, 2, true));   // -qq
  EXPECT_FALSE(HeartbeatWanted(0, 0, true));    // --heartbeat 0
}

TEST(Heartbeat, ALineSaysTheTimeElapsedAndTheTracesSoFar) {
  EXPECT_EQ(HeartbeatLine(59 * kSecond, {}, std::nullopt), "59s elapsed, no trace written yet");
  EXPECT_EQ(HeartbeatLine(125 * kSecond, {1, 3072}, std::nullopt),
            "2m 05s elapsed, 1 trace so far (3.0 KiB)");
  EXPECT_EQ(HeartbeatLine(3723 * kSecond, {8, 3u << 20}, Recorded{8, 1u << 20}),
            "1h 02m 03s elapsed, 8 traces so far (3.0 MiB, +2.0 MiB since the last line)");
  // Nothing grew: no growth named.
  EXPECT_EQ(HeartbeatLine(60 * kSecond, {2, 100}, Recorded{2, 100}),
            "1m 00s elapsed, 2 traces so far (100 B)");
}

TEST(Heartbeat, EachBeatWritesOneLineFromTheStartAndNamesTheGrowthSinceTheLast) {
  uint64_t now = 5 * kSecond;
  Recorded recorded;
  std::vector<std::string> lines;
  Heartbeat beat([&] { return now; }, [&] { return recorded; },
                 [&](const std::string& line) { lines.push_back(line); });
  now += 60 * kSecond;
  recorded = {1, 2048};
  beat.Beat();
  now += 60 * kSecond;
  recorded = {2, 4096};
  beat.Beat();
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "1m 00s elapsed, 1 trace so far (2.0 KiB)",
                       "2m 00s elapsed, 2 traces so far (4.0 KiB, +2.0 KiB since the last line)"}));
}

TEST(Heartbeat, CountsTheTracesThisRunWroteAndTheirSize) {
  const testutil::TempDir tmp("fp8audit-heartbeat-");
  const fs::path dir = tmp.path();
  auto trace = [&](const std::string& name, const std::string& run_id) {
    testing::TraceBuilder t(0, 100, "nvtx");
    t.header()->set_run_id(run_id);
    t.MarkedMicrobatch();
    EXPECT_TRUE(t.Write((dir / name).string()));
    return fs::file_size(dir / name);
  };
  trace("earlier.fp8trace", "this-run");  // there before the run: not counted
  const reports::TraceDirSnapshot before = reports::SnapshotTraceDir(dir.string());
  EXPECT_EQ(RecordedSince(dir.string(), before, "this-run").traces, 0u);
  const uint64_t a = trace("a.fp8trace", "this-run");
  const uint64_t b = trace("b.fp8trace", "this-run");
  trace("other.fp8trace", "another-run");  // another run's, in the same --out
  std::ofstream(dir / "notes.txt") << "not a trace";
  const Recorded recorded = RecordedSince(dir.string(), before, "this-run");
  EXPECT_EQ(recorded.traces, 2u);
  EXPECT_EQ(recorded.bytes, a + b);
}

}  // namespace
}  // namespace fp8audit::cli
