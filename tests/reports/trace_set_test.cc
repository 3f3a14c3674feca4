#include "reports/trace_set.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "reports/progress.h"
#include "reports/ranks.h"
#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::Count;
using testing::TraceBuilder;

class TraceSetTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Path(name); }
  std::string Write(const std::string& name, const TraceBuilder& t) const {
    const std::string p = Path(name);
    EXPECT_TRUE(t.Write(p));
    return p;
  }

  testutil::TempDir tmp_{"fp8audit-trace-set-"};
  const fs::path dir_{tmp_.path()};
};

// Traces that pass one by one but are not one job's are noted (issue 34 item 12): two TE versions,
// and one process claiming several ranks. The outcome stands.
TEST_F(TraceSetTest, TwoTeVersionsAndOneProcessWithSeveralRanksAreNoted) {
  std::vector<std::string> files;
  for (int rank = 0; rank < 3; ++rank) {
    TraceBuilder t(rank, 4242, "nvtx");
    t.TeVersion(rank == 2 ? "2.19.0" : "2.20.2").MarkedMicrobatch().Footer();
    files.push_back(Write("r" + std::to_string(rank) + ".fp8trace", t));
  }
  const TraceSetResult result = AuditTraceFiles(files, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kPass);
  auto noted = [&](const std::string& start) {
    return std::any_of(result.problems.begin(), result.problems.end(),
                       [&](const std::string& p) { return p.rfind(start, 0) == 0; });
  };
  EXPECT_TRUE(
      noted("these traces record 2 Transformer Engine versions: 2.19.0 (1 trace), 2.20.2 "
            "(2 traces)"))
      << ::testing::PrintToString(result.problems);
  EXPECT_TRUE(noted("one process, pid 4242 on testhost, wrote the traces of ranks 0, 1, 2"))
      << ::testing::PrintToString(result.problems);
}

TEST_F(TraceSetTest, OneJobsTracesGetNoNote) {
  std::vector<std::string> files;
  for (int rank = 0; rank < 2; ++rank) {
    TraceBuilder t(rank, 100 + rank, "nvtx");
    t.TeVersion("2.20.2").MarkedMicrobatch().Footer();
    files.push_back(Write("r" + std::to_string(rank) + ".fp8trace", t));
  }
  const TraceSetResult result = AuditTraceFiles(files, TraceSetOptions{});
  EXPECT_EQ(result.outcome, Outcome::kPass);
  EXPECT_TRUE(result.problems.empty()) << ::testing::PrintToString(result.problems);
}

// Issue 36 item 1: a job whose modules ran under Float8CurrentScaling only has no update to count;
// with recomputes it is judged on them (PASS here), without any it has nothing to judge.
TEST_F(TraceSetTest, ARecipeWithoutStateUpdatesPassesOnItsRecomputesAndWithoutThemIsNotJudged) {
  TraceBuilder checked(0, 4242, "nvtx");
  checked.Recipe("Float8CurrentScaling").Begin().Autocast(true, 1).Autocast(false, 0);
  checked.BackwardBegin().Recompute("Linear#1", v1::FP8_ON, v1::FP8_ON).BackwardEnd().End();
  const TraceSetResult pass =
      AuditTraceFiles({Write("checked.fp8trace", checked.Footer())}, TraceSetOptions{});
  EXPECT_EQ(pass.outcome, Outcome::kPass) << ::testing::PrintToString(pass.problems);
  EXPECT_EQ(pass.report.verdict(), v1::PASS);

  TraceBuilder unchecked(0, 4243, "nvtx");
  unchecked.Recipe("Float8CurrentScaling").Begin().Autocast(true, 1).Autocast(false, 0);
  unchecked.BackwardBegin().BackwardEnd().End();
  const TraceSetResult nothing =
      AuditTraceFiles({Write("unchecked.fp8trace", unchecked.Footer())}, TraceSetOptions{});
  EXPECT_EQ(nothing.outcome, Outcome::kNothingAudited);
  ASSERT_EQ(nothing.report.ranks_size(), 1);
  EXPECT_EQ(nothing.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  EXPECT_TRUE(std::any_of(nothing.problems.begin(), nothing.problems.end(),
                          [](const std::string& p) {
                            return Contains(p,
                                            "ran under Float8CurrentScaling, which has no "
                                            "global FP8 state updates");
                          }))
      << ::testing::PrintToString(nothing.problems);
}

TEST_F(TraceSetTest, NothingToJudgeNamesEveryRanksRecipeOnce) {
  std::vector<std::string> paths;
  int rank = 0;
  for (const char* recipe : {"Float8CurrentScaling", "Float8BlockScaling", "Float8BlockScaling"}) {
    TraceBuilder t(rank, 4300 + rank, "nvtx");
    t.Recipe(recipe).Begin().Autocast(true, 1).Autocast(false, 0);
    t.BackwardBegin().BackwardEnd().End();
    paths.push_back(Write("rank" + std::to_string(rank++) + ".fp8trace", t.Footer()));
  }
  const TraceSetResult nothing = AuditTraceFiles(paths, TraceSetOptions{});
  EXPECT_EQ(nothing.outcome, Outcome::kNothingAudited);
  EXPECT_TRUE(std::any_of(nothing.problems.begin(), nothing.problems.end(),
                          [](const std::string& p) {
                            return Contains(p,
                                            "ran under Float8BlockScaling and "
                                            "Float8CurrentScaling, which have no global FP8 state "
                                            "updates");
                          }))
      << ::testing::PrintToString(nothing.problems);
}

TEST_F(TraceSetTest, WriterReaderRoundTripThroughTheAudit) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(2, 3).Footer();
  const std::string path = Write("host.77.rank0.fp8trace", t);
  std::string problem;
  const v1::RankReport r = AuditTraceFile(path, TraceSetOptions{}, &problem);
  EXPECT_TRUE(problem.empty()) << problem;
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.rank(), 0);
  EXPECT_EQ(r.header().pid(), 77u);
  EXPECT_EQ(r.header().host(), "testhost");
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).forward_updates(), 2u);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 3u);
  EXPECT_EQ(r.totals().events(), t.records().size() - 2);  // less header and footer
  EXPECT_EQ(r.totals().kernel_launches(), 7u);
  EXPECT_EQ(r.verdict(), v1::FAIL);
  EXPECT_TRUE(r.damage().empty());
}

TEST_F(TraceSetTest, TruncatedTraceReportsEveryWholeRecordBeforeTheDamage) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(1, 2).MarkedMicrobatch().Footer();
  const std::string path = Write("t.fp8trace", t);
  // Cut inside the footer: every event survives, the footer is damaged.
  fs::resize_file(path, fs::file_size(path) - 2);
  std::string problem;
  const v1::RankReport r = AuditTraceFile(path, TraceSetOptions{}, &problem);
  const size_t records = t.records().size();
  EXPECT_TRUE(Contains(problem,
                       path + ": trace damaged at record " + std::to_string(records) + " at byte "))
      << problem;
  EXPECT_TRUE(Contains(problem, "truncated")) << problem;
  EXPECT_TRUE(Contains(problem, std::to_string(records - 1) + " whole records")) << problem;
  EXPECT_FALSE(r.damage().empty());
  ASSERT_EQ(r.microbatches_size(), 3);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 2u);
  EXPECT_EQ(r.totals().events(), records - 2);
  bool damage_violation = false;
  for (const auto& v : r.violations()) {
    if (v.kind() == v1::Violation::TRACE_DAMAGED) damage_violation = true;
  }
  EXPECT_TRUE(damage_violation);

  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kViolations);  // microbatch 1's, before the damage, is known
  ASSERT_EQ(set.problems.size(), 1u);
}

TEST_F(TraceSetTest, TruncationInsideAnEventKeepsTheEventsBeforeIt) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch();
  const std::string path = Write("t.fp8trace", t);
  fs::resize_file(path, fs::file_size(path) - 3);  // inside the last END marker
  std::string problem;
  const v1::RankReport r = AuditTraceFile(path, TraceSetOptions{}, &problem);
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).forward_updates(), 1u);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 1u);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::PASS);  // incomplete, no excess
}

TEST_F(TraceSetTest, CorruptedTraceNamesTheRecordAndByteOffset) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch();
  const std::string path = Write("c.fp8trace", t);
  // Recompute where record 4 starts, then corrupt its size prefix into a huge value.
  std::string bytes = t.Bytes();
  uint64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    std::string one;
    AppendRecord(t.records()[i], &one);
    offset += one.size();
  }
  bytes[offset] = '\xff';
  bytes.insert(offset + 1, "\xff\xff\xff\x0f");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  std::string problem;
  const v1::RankReport r = AuditTraceFile(path, TraceSetOptions{}, &problem);
  EXPECT_TRUE(Contains(problem, "record 4 at byte " + std::to_string(offset))) << problem;
  EXPECT_EQ(r.totals().events(), 2u);
}

TEST_F(TraceSetTest, EmptyTraceIsAClearErrorNamingTheFile) {
  const std::string path = Path("empty.fp8trace");
  std::ofstream(path, std::ios::binary);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_TRUE(Contains(set.problems[0], path + ": empty trace (0 bytes)")) << set.problems[0];
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  ASSERT_EQ(set.report.ranks_size(), 1);
  EXPECT_EQ(set.report.ranks(0).verdict(), v1::FAIL);
  EXPECT_EQ(set.report.verdict(), v1::FAIL);
}

TEST_F(TraceSetTest, FileThatIsNotATraceIsAnError) {
  const std::string text = Path("notes.fp8trace");
  std::ofstream(text) << "this is not a trace\n";
  std::string problem;
  AuditTraceFile(text, TraceSetOptions{}, &problem);
  EXPECT_TRUE(Contains(problem, text + ": not a readable trace: record 1 at byte 0")) << problem;

  // A well-formed record that is not a header.
  std::string bytes;
  v1::TraceRecord event;
  event.mutable_event()->set_kind(v1::UPDATE_FORWARD);
  AppendRecord(event, &bytes);
  const std::string headless = Path("headless.fp8trace");
  std::ofstream(headless, std::ios::binary) << bytes;
  AuditTraceFile(headless, TraceSetOptions{}, &problem);
  EXPECT_TRUE(Contains(problem, "the first record is not a header")) << problem;
}

TEST_F(TraceSetTest, SecondHeaderIsDamage) {
  TraceBuilder a(0, 1, "nvtx");
  a.MarkedMicrobatch();
  TraceBuilder b(0, 2, "nvtx");
  b.MarkedMicrobatch();
  const std::string path = Path("cat.fp8trace");
  std::ofstream(path, std::ios::binary) << a.Bytes() << b.Bytes();
  std::string problem;
  const v1::RankReport r = AuditTraceFile(path, TraceSetOptions{}, &problem);
  EXPECT_TRUE(Contains(problem, "a second header")) << problem;
  EXPECT_EQ(r.microbatches_size(), 1);
}

// ---- Incomplete traces: a killed process, truncation, hostile framing --------------------------

TEST_F(TraceSetTest, TraceWithoutAFooterIsIncompleteAndNamesTheUnfinishedMicrobatch) {
  // SIGKILL, the OOM killer, abort() or _exit(): the agent never writes its footer.
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(29, 196).Begin().Forward().BackwardBegin();
  const std::string path = Write("killed.fp8trace", t);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kViolations);  // microbatch 1's is known: it decides
  EXPECT_EQ(set.problems,
            std::vector<std::string>{
                path + ": trace ends without a footer (the process was killed?): microbatch 2 "
                       "unfinished; the 2 whole microbatches before it are reported"});
  // Every whole microbatch is still reported, the violation in microbatch 1 included.
  const v1::RankReport& r = set.report.ranks(0);
  ASSERT_EQ(r.microbatches_size(), 3);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::FAIL);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  EXPECT_TRUE(Contains(r.damage(), "trace ends without a footer")) << r.damage();
  EXPECT_EQ(set.report.verdict(), v1::FAIL);
}

TEST_F(TraceSetTest, TraceWithoutAFooterAfterAWholeMicrobatchSaysWhereItEnds) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch();
  const std::string a = Write("a.fp8trace", t);
  TraceBuilder threads(-1, 78);  // no markers: pass boundaries segment
  threads.PlainMicrobatch().PlainMicrobatch();
  const std::string b = Write("b.fp8trace", threads);
  TraceBuilder header_only(-1, 79);
  const std::string c = Write("c.fp8trace", header_only);
  const TraceSetResult set = AuditTraceFiles({a, b, c}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.problems,
            (std::vector<std::string>{
                a + ": trace ends without a footer (the process was killed?) after microbatch 1; "
                    "the 2 whole microbatches before it are reported",
                b + ": trace ends without a footer (the process was killed?): microbatch 1 "
                    "unfinished; the 1 whole microbatch before it is reported",
                c + ": trace ends without a footer (the process was killed?) before its first "
                    "microbatch"}));
}

TEST_F(TraceSetTest, TruncationAtEveryRecordBoundaryIsIncomplete) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(1, 2).MarkedMicrobatch().Footer();
  const std::string bytes = t.Bytes();
  const std::string path = Path("cut.fp8trace");
  std::ofstream(path, std::ios::binary) << bytes;
  ASSERT_EQ(AuditTraceFiles({path}, TraceSetOptions{}).outcome, Outcome::kViolations);
  uint64_t boundary = 0;
  int backward = 0;  // backward updates before the cut
  for (const v1::TraceRecord& record : t.records()) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, boundary);
    const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
    // Incomplete; once microbatch 1's second backward update (its excess) is before the cut,
    // that known violation decides.
    EXPECT_EQ(set.outcome, backward >= 3 ? Outcome::kViolations : Outcome::kIncomplete)
        << "cut at byte " << boundary;
    if (record.has_event() && record.event().kind() == v1::UPDATE_BACKWARD) ++backward;
    EXPECT_EQ(set.problems.size(), 1u) << "cut at byte " << boundary;
    std::string one;
    AppendRecord(record, &one);
    boundary += one.size();
  }
  EXPECT_EQ(boundary, bytes.size());
}

TEST_F(TraceSetTest, RecordsAfterTheFooterAreDamage) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().Footer();
  TraceBuilder more(0, 77, "nvtx");
  more.MarkedMicrobatch(29, 196);
  std::string bytes = t.Bytes();
  const uint64_t after_footer = bytes.size();
  for (size_t i = 1; i < more.records().size(); ++i) AppendRecord(more.records()[i], &bytes);
  const std::string path = Path("mid.fp8trace");
  std::ofstream(path, std::ios::binary) << bytes;
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_EQ(set.problems[0],
            path + ": trace damaged at record " + std::to_string(t.records().size() + 1) +
                " at byte " + std::to_string(after_footer) + ": a record after the footer; the " +
                std::to_string(t.records().size()) + " whole records before it are reported");
  EXPECT_EQ(set.report.ranks(0).totals().microbatches(), 1u);  // what follows is not audited
}

TEST_F(TraceSetTest, NewerSchemaVersionIsRefused) {
  TraceBuilder t(0, 77, "nvtx");
  t.header()->set_schema_version(99);
  t.MarkedMicrobatch().Footer();
  const std::string path = Write("new.fp8trace", t);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.problems, std::vector<std::string>{
                              path + ": written by a newer fp8audit (trace schema version 99; "
                                     "this one reads up to 1): read it with that version"});
  EXPECT_EQ(set.report.ranks(0).totals().microbatches(), 0u);
}

TEST_F(TraceSetTest, OneFileGivenTwiceIsRefused) {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().Footer();
  const std::string path = Write("a.fp8trace", t);
  std::vector<std::string> files;
  std::string error;
  EXPECT_FALSE(ExpandTracePaths({path, path}, &files, &error));
  EXPECT_EQ(error, path + ": given twice (the same file as " + path + ")");
  // A directory and a file in it; a second name (hard link) of the same file.
  files.clear();
  EXPECT_FALSE(ExpandTracePaths({dir_.string(), path}, &files, &error));
  EXPECT_EQ(error, path + ": given twice (the same file as " + path + ")");
  fs::create_directories(Path("other"));
  fs::create_hard_link(path, Path("other/b.fp8trace"));
  files.clear();
  EXPECT_FALSE(ExpandTracePaths({path, Path("other")}, &files, &error));
  EXPECT_EQ(error, Path("other/b.fp8trace") + ": given twice (the same file as " + path + ")");
}

TEST_F(TraceSetTest, FifoAndDevicePathsAreRefusedBeforeReading) {
  const std::string fifo = Path("pipe.fp8trace");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> files;
  std::string error;
  EXPECT_FALSE(ExpandTracePaths({fifo}, &files, &error));
  EXPECT_EQ(error, fifo + ": not a regular file (a FIFO)");
  EXPECT_FALSE(ExpandTracePaths({"/dev/zero"}, &files, &error));
  EXPECT_EQ(error, "/dev/zero: not a regular file (a character device)");
  // Read anyway (a race with the check): refused, not waited on.
  const TraceSetResult set = AuditTraceFiles({fifo}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.problems,
            std::vector<std::string>{fifo + ": cannot read: not a regular file (a FIFO)"});
}

TEST_F(TraceSetTest, DirectoryReadsEveryTraceSortedByRankThenPid) {
  for (const auto& [rank, pid] : std::vector<std::pair<int, int>>{{1, 20}, {0, 30}, {0, 10}}) {
    TraceBuilder t(rank, pid, "nvtx");
    if (pid == 10) t.header()->set_parent_pid(30);  // a forked worker of rank 0
    t.MarkedMicrobatch().Footer();
    Write("h." + std::to_string(pid) + ".rank" + std::to_string(rank) + ".fp8trace", t);
  }
  std::ofstream(Path("README.txt")) << "not a trace";
  std::vector<std::string> files;
  std::string error;
  ASSERT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error)) << error;
  ASSERT_EQ(files.size(), 3u);
  const TraceSetResult set = AuditTraceFiles(files, TraceSetOptions{});
  ASSERT_EQ(set.report.ranks_size(), 3);
  EXPECT_EQ(set.report.ranks(0).rank(), 0);
  EXPECT_EQ(set.report.ranks(0).header().pid(), 10u);
  EXPECT_EQ(set.report.ranks(1).header().pid(), 30u);
  EXPECT_EQ(set.report.ranks(2).rank(), 1);
  EXPECT_EQ(set.report.totals().microbatches(), 3u);
  EXPECT_EQ(set.report.verdict(), v1::PASS);
  EXPECT_EQ(set.outcome, Outcome::kPass);
}

TEST_F(TraceSetTest, MissingPathAndDirectoryWithoutTracesAreErrors) {
  std::vector<std::string> files;
  std::string error;
  EXPECT_FALSE(ExpandTracePaths({Path("nope.fp8trace")}, &files, &error));
  EXPECT_TRUE(Contains(error, "nope.fp8trace: no such file or directory")) << error;
  EXPECT_FALSE(ExpandTracePaths({dir_.string()}, &files, &error));
  EXPECT_TRUE(Contains(error, "no *.fp8trace files")) << error;
}

TEST_F(TraceSetTest, SymbolicLinksInADirectoryAreSkippedButOneNamedIsRead) {
  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch().Footer();
  const std::string real = Write("host.1.rank0.fp8trace", t);
  // A link planted among the traces, to a file elsewhere (here a trace, so that following it
  // would show), and one to something that is not a trace at all. Elsewhere is outside the
  // directory: its subdirectories are read.
  const fs::path elsewhere = dir_.string() + "-elsewhere";
  fs::remove_all(elsewhere);
  fs::create_directories(elsewhere);
  EXPECT_TRUE(t.Write((elsewhere / "secret.fp8trace").string()));
  fs::create_symlink(elsewhere / "secret.fp8trace", dir_ / "host.2.rank1.fp8trace");
  fs::create_symlink("/etc/passwd", dir_ / "host.3.rank2.fp8trace");
  fs::create_directory_symlink(elsewhere, dir_ / "nodes");  // a directory elsewhere: not read
  std::vector<std::string> files;
  std::vector<std::string> skipped;
  std::string error;
  ASSERT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error, &skipped)) << error;
  EXPECT_EQ(files, std::vector<std::string>{real});
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], dir_.string() +
                            ": skipped 3 symbolic links (host.2.rank1.fp8trace, "
                            "host.3.rank2.fp8trace, nodes): links in a directory are not "
                            "followed; name a trace to read it");
  // Named explicitly, a link is read.
  files.clear();
  skipped.clear();
  ASSERT_TRUE(ExpandTracePaths({Path("host.2.rank1.fp8trace")}, &files, &error, &skipped));
  EXPECT_EQ(files, std::vector<std::string>{Path("host.2.rank1.fp8trace")});
  EXPECT_TRUE(skipped.empty());
  // A directory of links alone has no traces.
  fs::remove(real);
  EXPECT_FALSE(ExpandTracePaths({dir_.string()}, &files, &error, &skipped));
  EXPECT_TRUE(Contains(error, "no *.fp8trace files in this directory (only symbolic links"))
      << error;
  fs::remove_all(elsewhere);
}

TEST_F(TraceSetTest, TracesWrittenSinceIgnoresSymbolicLinks) {
  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch().Footer();
  const TraceDirSnapshot before = SnapshotTraceDir(dir_.string());
  const std::string fresh = Write("new.fp8trace", t);
  EXPECT_TRUE(t.Write(Path("target.bin")));
  fs::create_symlink(Path("target.bin"), Path("planted.fp8trace"));
  EXPECT_EQ(TracesWrittenSince(dir_.string(), before), std::vector<std::string>{fresh});
}

TEST_F(TraceSetTest, HeaderExpectationIsUsedUnlessOverridden) {
  TraceBuilder t(0, 1, "nvtx");
  t.header()->set_expect_forward(2);
  t.header()->set_expect_backward(1);
  t.MarkedMicrobatch(2, 1).Footer();
  const std::string path = Write("e.fp8trace", t);
  EXPECT_EQ(AuditTraceFiles({path}, TraceSetOptions{}).outcome, Outcome::kPass);
  TraceSetOptions strict;
  strict.expect_forward = 1;
  EXPECT_EQ(AuditTraceFiles({path}, strict).outcome, Outcome::kViolations);
}

TEST_F(TraceSetTest, ZeroExpectationInTheHeaderIsKeptForCurrentScaling) {
  TraceBuilder t(0, 1, "nvtx");
  t.header()->set_expect_forward(0);
  t.header()->set_expect_backward(0);
  t.MarkedMicrobatch(0, 0).Footer();
  EXPECT_EQ(AuditTraceFiles({Write("z.fp8trace", t)}, TraceSetOptions{}).outcome, Outcome::kPass);
  TraceBuilder u(0, 2, "nvtx");
  u.MarkedMicrobatch(0, 0).MarkedMicrobatch(1, 1).Footer();  // no expectation recorded: 1/1
  EXPECT_EQ(AuditTraceFiles({Write("u.fp8trace", u)}, TraceSetOptions{}).outcome,
            Outcome::kViolations);
}

TEST_F(TraceSetTest, RanksThatDisagreeOnTheirMicrobatchesFailTheJob) {
  TraceBuilder r0(0, 1, "nvtx");
  r0.MarkedMicrobatch().MarkedMicrobatch().Footer();
  TraceBuilder r1(1, 2, "nvtx");
  r1.MarkedMicrobatch().Footer();
  TraceBuilder child(1, 3, "nvtx");  // a forked worker of rank 1: not a rank of its own
  child.header()->set_parent_pid(2);
  child.Footer();
  const TraceSetResult set = AuditTraceFiles(
      {Write("a.fp8trace", r0), Write("b.fp8trace", r1), Write("c.fp8trace", child)},
      TraceSetOptions{});
  ASSERT_EQ(set.report.violations_size(), 1);
  EXPECT_EQ(set.report.violations(0).kind(), v1::Violation::RANK_DISAGREEMENT);
  EXPECT_EQ(set.report.violations(0).message(),
            "ranks disagree on the number of microbatches (rank 0: 2; rank 1: 1)");
  EXPECT_EQ(set.report.verdict(), v1::FAIL);
  EXPECT_EQ(set.outcome, Outcome::kViolations);
}

TEST_F(TraceSetTest, NoMicrobatchAnywhereIsNothingAudited) {
  TraceBuilder t(0, 1, "nvtx");
  t.Footer();
  const std::string path = Write("n.fp8trace", t);
  EXPECT_EQ(AuditTraceFiles({path}, TraceSetOptions{}).outcome, Outcome::kNothingAudited);
  TraceSetOptions zero;
  zero.expect_forward = 0;
  zero.expect_backward = 0;
  EXPECT_EQ(AuditTraceFiles({path}, zero).outcome, Outcome::kPass);
}

// The line a job with microbatches but not one FP8 state update gets (N microbatches, T traces).
std::string NothingToJudge(const std::string& what) {
  return "nothing to judge: " + what +
         " and not one FP8 state update: the job does not use DelayedScaling (plain PyTorch, "
         "torch._scaled_mm, another recipe), or Transformer Engine runs its unfused update path "
         "(NVTE_UNFUSED_FP8_UPDATE=1) and the Python hook did not record it (--no-python-hook), "
         "or its update kernels have names the agent's patterns do not know: record again with "
         "`fp8audit run` (its Python hook counts TE's updates), or with `--patterns FILE` naming "
         "the kernels (for a job meant to make no updates: --expect-forward 0 "
         "--expect-backward 0)";
}

TEST_F(TraceSetTest, MicrobatchesWithoutAnyUpdateAreNothingToJudge) {
  // A plain PyTorch job: pass boundaries from the autograd threads, no update kernel anywhere.
  TraceBuilder t(-1, 1);
  for (int i = 0; i < 6; ++i) t.PlainMicrobatch(0, 0);
  t.Footer();
  const std::string path = Write("plain.fp8trace", t);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kNothingAudited);
  EXPECT_EQ(set.problems, std::vector<std::string>{NothingToJudge("6 microbatches in 1 trace")});
  EXPECT_EQ(set.report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  EXPECT_EQ(std::vector<std::string>(set.report.problems().begin(), set.report.problems().end()),
            set.problems);
  EXPECT_EQ(set.report.totals().microbatches(), 6u);
  // Expecting none: a pass.
  TraceSetOptions zero;
  zero.expect_forward = 0;
  zero.expect_backward = 0;
  EXPECT_EQ(AuditTraceFiles({path}, zero).outcome, Outcome::kPass);
}

TEST_F(TraceSetTest, NothingAuditedTraceIsNeitherFailingNorCountsFailingMicrobatches) {
  TraceBuilder t(-1, 1);
  for (int i = 0; i < 6; ++i) t.PlainMicrobatch(0, 0);
  t.Footer();
  const TraceSetResult set = AuditTraceFiles({Write("plain.fp8trace", t)}, TraceSetOptions{});
  ASSERT_EQ(set.report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  ASSERT_EQ(set.report.ranks_size(), 1);
  const v1::RankReport& r = set.report.ranks(0);
  EXPECT_EQ(r.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  EXPECT_NE(r.verdict(), v1::FAIL);
  EXPECT_NE(set.report.verdict(), v1::FAIL);
  EXPECT_EQ(r.totals().microbatches(), 6u);
  EXPECT_EQ(r.totals().failing_microbatches(), 0u);
  EXPECT_EQ(set.report.totals().failing_microbatches(), 0u);
  EXPECT_EQ(r.violations_size(), 0);
  ASSERT_EQ(r.microbatches_size(), 6);
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    EXPECT_EQ(row.verdict(), v1::VERDICT_UNSPECIFIED) << row.index();
  }
  // Read back (a JSON report's ranks): the same conclusion.
  const TraceSetResult again = AuditRankReports({r}, TraceSetOptions{});
  EXPECT_EQ(again.report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  EXPECT_EQ(again.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
}

TEST_F(TraceSetTest, EveryTraceCarriesItsOutcome) {
  TraceBuilder pass(-1, 1);
  pass.PlainMicrobatch().Footer();
  TraceBuilder fail(-1, 2);
  fail.PlainMicrobatch(1, 2).Footer();
  const TraceSetResult set = AuditTraceFiles(
      {Write("pass.fp8trace", pass), Write("fail.fp8trace", fail)}, TraceSetOptions{});
  ASSERT_EQ(set.report.ranks_size(), 2);
  EXPECT_EQ(set.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_PASS);
  EXPECT_EQ(set.report.ranks(1).outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
}

TEST_F(TraceSetTest, SomeMicrobatchesWithoutUpdatesStayAViolation) {
  TraceBuilder t(-1, 1);
  t.PlainMicrobatch().PlainMicrobatch(0, 0).PlainMicrobatch().Footer();
  const TraceSetResult set = AuditTraceFiles({Write("some.fp8trace", t)}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kViolations);
  EXPECT_EQ(set.report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  EXPECT_TRUE(set.problems.empty());
  EXPECT_EQ(set.report.totals().failing_microbatches(), 1u);
}

TEST_F(TraceSetTest, NoTraceWithAMicrobatchIsNothingAudited) {
  TraceBuilder t(0, 1, "nvtx");
  t.Footer();
  const TraceSetResult set = AuditTraceFiles({Write("n.fp8trace", t)}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kNothingAudited);
  EXPECT_EQ(set.problems,
            std::vector<std::string>{
                "nothing to audit: no microbatch in 1 trace (no FP8 state update and no pass "
                "boundary was recorded; is the job using DelayedScaling, and do the agent's kernel "
                "patterns match it?)"});
}

TEST_F(TraceSetTest, TracesWrittenSinceSeesNewAndChangedFilesOnly) {
  TraceBuilder t(0, 1, "nvtx");
  t.MarkedMicrobatch();
  const std::string old_file = Write("old.fp8trace", t);
  const std::string changed = Write("changed.fp8trace", t);
  const TraceDirSnapshot before = SnapshotTraceDir(dir_.string());
  EXPECT_EQ(before.size(), 2u);
  t.MarkedMicrobatch();
  Write("changed.fp8trace", t);  // grows
  const std::string fresh = Write("new.fp8trace", t);
  std::ofstream(Path("other.txt")) << "x";
  const auto written = TracesWrittenSince(dir_.string(), before);
  EXPECT_EQ(written, (std::vector<std::string>{changed, fresh}));
}

TEST_F(TraceSetTest, LongTraceStreamsWithBoundedRows) {
  const std::string path = Path("long.fp8trace");
  {
    std::string error;
    auto writer = TraceFileWriter::Create(path, &error);
    ASSERT_NE(writer, nullptr);
    TraceBuilder head(0, 1, "nvtx");
    writer->Write(head.records()[0]);
    std::string chunk;
    uint64_t events = 0;
    for (int i = 0; i < 20000; ++i) {
      TraceBuilder mb(0, 1, "nvtx");
      mb.MarkedMicrobatch(1, i == 12345 ? 5 : 1);
      for (size_t k = 1; k < mb.records().size(); ++k) AppendRecord(mb.records()[k], &chunk);
      events += mb.records().size() - 1;
    }
    v1::TraceRecord footer;
    footer.mutable_footer()->set_events(events);  // every event record written
    AppendRecord(footer, &chunk);
    writer->WriteFramed(chunk);
  }
  TraceSetOptions options;
  options.max_rows = 50;
  options.max_violations = 50;
  const TraceSetResult set = AuditTraceFiles({path}, options);
  const v1::RankReport& r = set.report.ranks(0);
  EXPECT_EQ(r.totals().microbatches(), 20000u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  ASSERT_EQ(r.microbatches_size(), 1);
  EXPECT_EQ(r.microbatches(0).index(), 12345u);
  EXPECT_EQ(set.outcome, Outcome::kViolations);
}

// ---- Multi-rank jobs ---------------------------------------------------------------------------

// Updates of one microbatch of one rank that differ from 1/1: {rank, microbatch} -> {F, B}.
using Odd = std::map<std::pair<int, int>, std::pair<int, int>>;

class MultiRankTest : public TraceSetTest {
 protected:
  // Writes rank r's trace as testhost.<100+r>.rank<r>.fp8trace: `microbatches` marked
  // microbatches, 1/1 unless `odd` says otherwise.
  std::string WriteRank(int rank, int microbatches, const Odd& odd = {}, int pid = 0) {
    TraceBuilder t(rank, pid != 0 ? pid : 100 + rank, "nvtx");
    for (int m = 0; m < microbatches; ++m) {
      auto it = odd.find({rank, m});
      if (it == odd.end()) {
        t.MarkedMicrobatch();
      } else {
        t.MarkedMicrobatch(it->second.first, it->second.second);
      }
    }
    t.Footer();
    return Write("testhost." + std::to_string(t.header()->pid()) + ".rank" + std::to_string(rank) +
                     ".fp8trace",
                 t);
  }
  std::vector<std::string> WriteJob(int ranks, int microbatches, const Odd& odd = {}) {
    std::vector<std::string> files;
    for (int r = 0; r < ranks; ++r) files.push_back(WriteRank(r, microbatches, odd));
    return files;
  }
  TraceSetResult AuditDir(const TraceSetOptions& options = {}) const {
    std::vector<std::string> files;
    std::string error;
    EXPECT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error)) << error;
    return AuditTraceFiles(files, options);
  }
};

std::vector<std::string> JobMessages(const TraceSetResult& set) {
  std::vector<std::string> out;
  for (const v1::Violation& v : set.report.violations()) {
    EXPECT_EQ(v.kind(), v1::Violation::RANK_DISAGREEMENT) << v.message();
    EXPECT_EQ(v.rank(), -1) << v.message();
    out.push_back(v.message());
  }
  return out;
}

std::string Describe(const TraceSetResult& set) {
  std::string out;
  for (const std::string& p : set.problems) out += "problem: " + p + "\n";
  return out + RenderText(set.report, RenderOptions{});
}

TEST_F(MultiRankTest, TwoRanksThatAgreePass) {
  WriteJob(2, 3);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kPass) << Describe(set);
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
  EXPECT_TRUE(set.problems.empty());
  ASSERT_EQ(set.report.ranks_size(), 2);
  EXPECT_EQ(set.report.totals().microbatches(), 6u);
}

TEST_F(MultiRankTest, TwoRanksDisagreeingInOneMicrobatchIsAJobViolation) {
  WriteJob(2, 3, {{{1, 1}, {2, 3}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_EQ(JobMessages(set),
            std::vector<std::string>{"ranks disagree in microbatch 1 (forward/backward updates): "
                                     "rank 0: 1/1; rank 1: 2/3"})
      << Describe(set);
  ASSERT_EQ(set.report.violations_size(), 1);
  EXPECT_EQ(set.report.violations(0).microbatch(), 1u);
  EXPECT_EQ(set.report.ranks(0).verdict(), v1::PASS);
  EXPECT_EQ(set.report.ranks(1).verdict(), v1::FAIL);
  EXPECT_EQ(set.report.verdict(), v1::FAIL);
  EXPECT_TRUE(set.problems.empty());
}

TEST_F(MultiRankTest, EightRanksOneDisagreeingInOneMicrobatch) {
  WriteJob(8, 4, {{{5, 2}, {1, 2}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_EQ(JobMessages(set),
            std::vector<std::string>{"ranks disagree in microbatch 2 (forward/backward updates): "
                                     "ranks 0-4, 6, 7: 1/1; rank 5: 1/2"})
      << Describe(set);
  ASSERT_EQ(set.report.ranks_size(), 8);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(set.report.ranks(r).rank(), r);
}

TEST_F(MultiRankTest, EightRanksThatAgreePass) {
  WriteJob(8, 5);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kPass) << Describe(set);
  EXPECT_TRUE(JobMessages(set).empty());
}

TEST_F(MultiRankTest, RanksThatFailAlikeDoNotDisagree) {
  WriteJob(2, 3, {{{0, 1}, {29, 196}}, {{1, 1}, {29, 196}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
  EXPECT_EQ(set.report.totals().failing_microbatches(), 2u);
}

TEST_F(MultiRankTest, ConsecutiveDisagreementsAreOneStretch) {
  WriteJob(2, 8, {{{1, 2}, {2, 1}}, {{1, 3}, {2, 1}}, {{1, 4}, {2, 1}}, {{1, 5}, {2, 1}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(
      JobMessages(set),
      std::vector<std::string>{"ranks disagree in microbatches 2-5 (forward/backward updates): "
                               "rank 0: 1/1; rank 1: 2/1"})
      << Describe(set);
}

TEST_F(MultiRankTest, DisagreementsBeyondTheLimitAreCounted) {
  Odd odd;
  for (int m = 1; m < 20; m += 2) odd[{1, m}] = {2, 1};
  WriteJob(2, 20, odd);
  TraceSetOptions options;
  options.max_violations = 3;
  const TraceSetResult set = AuditDir(options);
  const std::vector<std::string> messages = JobMessages(set);
  ASSERT_EQ(messages.size(), 4u) << Describe(set);
  EXPECT_EQ(messages[2],
            "ranks disagree in microbatch 5 (forward/backward updates): rank 0: 1/1; rank 1: 2/1");
  EXPECT_EQ(messages[3],
            "ranks also disagree in 7 more microbatches (7 more stretches, the last ending at "
            "microbatch 19)");
  options.max_violations = 0;
  EXPECT_EQ(AuditDir(options).report.violations_size(), 10);
}

TEST_F(MultiRankTest, DifferentNumbersOfMicrobatchesAndTheCommonOnesCompared) {
  WriteRank(0, 4);
  WriteRank(1, 3, {{{1, 1}, {2, 1}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_EQ(JobMessages(set),
            (std::vector<std::string>{
                "ranks disagree on the number of microbatches (rank 0: 4; rank 1: 3)",
                "ranks disagree in microbatch 1 (forward/backward updates): rank 0: 1/1; rank 1: "
                "2/1"}))
      << Describe(set);
}

TEST_F(MultiRankTest, EightRanksOneWithFewerMicrobatches) {
  for (int r = 0; r < 8; ++r) WriteRank(r, r == 7 ? 3 : 4);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_EQ(JobMessages(set),
            std::vector<std::string>{
                "ranks disagree on the number of microbatches (ranks 0-6: 4; rank 7: 3)"})
      << Describe(set);
}

TEST_F(MultiRankTest, TwoTracesClaimingOneRankMakeTheAuditIncomplete) {
  const std::string a = WriteRank(0, 2, {}, 100);
  const std::string b = WriteRank(0, 2, {}, 300);
  WriteRank(1, 2);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  EXPECT_EQ(set.report.verdict(), v1::FAIL);
  const std::string expected = "rank 0 is claimed by 2 traces: " + a +
                               " (pid 100, 2 microbatches), " + b +
                               " (pid 300, 2 microbatches); traces of more than one run or of a "
                               "restarted worker, or processes that share one RANK: the audit "
                               "cannot tell which is the rank's (audit one run's traces)";
  EXPECT_EQ(set.problems, std::vector<std::string>{expected});
  // Rank 0 is not compared: nothing says which of its traces is right.
  EXPECT_EQ(JobMessages(set), std::vector<std::string>{expected});
}

TEST_F(MultiRankTest, AHelperProcessWithTheRanksNumberIsNotASecondClaim) {
  WriteRank(0, 2);
  WriteRank(1, 2);
  TraceBuilder helper(1, 555, "nvtx");  // inherited RANK, launched a kernel, marked nothing
  helper.Footer();
  Write("testhost.555.rank1.fp8trace", helper);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kPass) << Describe(set);
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
  EXPECT_EQ(set.report.ranks_size(), 3);
}

TEST_F(MultiRankTest, MissingRankMakesTheAuditIncomplete) {
  WriteRank(0, 2);
  WriteRank(1, 2);
  WriteRank(3, 2);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  const std::string expected =
      "no trace of rank 2 (traces of ranks 0, 1, 3): the audit is incomplete; did that rank write "
      "its trace elsewhere, or end before its first kernel launch?";
  EXPECT_EQ(set.problems, std::vector<std::string>{expected});
  EXPECT_EQ(JobMessages(set), std::vector<std::string>{expected});
  ASSERT_EQ(set.report.missing_ranks_size(), 1);
  EXPECT_EQ(set.report.missing_ranks(0).first(), 2);
  EXPECT_EQ(set.report.missing_ranks(0).last(), 2);
}

TEST_F(MultiRankTest, RanksZeroAndMaxAreOneRangeOfMissingRanksInBoundedTimeAndSpace) {
  // A hostile directory: rank 0 and rank 2^31-1. The 2^31-2 ranks between are one range, not a
  // list, in the audit, in every rendering, and in the exit line.
  WriteRank(0, 2);
  WriteRank(2147483647, 2, {}, 555);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  EXPECT_EQ(set.problems,
            std::vector<std::string>{
                "no trace of ranks 1-2147483646 (2147483646 ranks; traces of ranks 0, "
                "2147483647): the audit is incomplete; did those ranks write their traces "
                "elsewhere, or end before their first kernel launch?"});
  ASSERT_EQ(set.report.missing_ranks_size(), 1);
  EXPECT_EQ(set.report.missing_ranks(0).first(), 1);
  EXPECT_EQ(set.report.missing_ranks(0).last(), 2147483646);
  for (Format f :
       {Format::kText, Format::kMarkdown, Format::kJson, Format::kJunit, Format::kHtml}) {
    std::string out, error;
    ASSERT_TRUE(Render(set.report, f, RenderOptions{}, &out, &error)) << error;
    EXPECT_LT(out.size(), 100u << 10) << static_cast<int>(f);
  }
  const std::string text = RenderText(set.report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "  1-2147483646  -  ")) << text;
  EXPECT_TRUE(Contains(text, "missing  no trace (2147483646 ranks)\n")) << text;
}

TEST_F(MultiRankTest, ManyGapsAreListedAsRangesAndCapped) {
  for (int r = 0; r <= 100; r += 2) WriteRank(r, 1);  // 51 traces, 50 gaps of one rank
  WriteRank(200, 1);                                  // and one of 99
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.report.missing_ranks_size(), 51);
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_TRUE(Contains(set.problems[0],
                       "no trace of ranks 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, "
                       "31, 33, 35, 37, 39 and 129 more in 31 ranges (149 ranks; traces of ranks "
                       "0, 2, 4, "))
      << set.problems[0];
  const std::string text = RenderText(set.report, RenderOptions{});
  EXPECT_TRUE(Contains(text, "missing  no trace\n")) << text;
  EXPECT_TRUE(Contains(text, "31 more ranges of missing ranks (129 ranks)")) << text;
  const std::string html = RenderHtml(set.report, RenderOptions{});
  EXPECT_EQ(Count(html, "<tr class=\"rank-row missing\">"), 20u) << html;
  EXPECT_TRUE(Contains(html, "31 more ranges of missing ranks (129 ranks)")) << html;
}

TEST_F(MultiRankTest, OneRanksTraceAloneMissesTheRanksBelowIt) {
  WriteRank(3, 2);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_TRUE(Contains(set.problems[0], "no trace of ranks 0-2")) << set.problems[0];
  WriteRank(0, 2);
  WriteRank(1, 2);
  WriteRank(2, 2);
  EXPECT_EQ(AuditDir().outcome, Outcome::kPass);
}

TEST_F(MultiRankTest, DamagedRankIsIncompleteWithoutABogusDisagreement) {
  WriteRank(0, 3);
  const std::string damaged = WriteRank(1, 3);
  fs::resize_file(damaged, fs::file_size(damaged) - 3);  // cut inside the last END marker
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_TRUE(Contains(set.problems[0], damaged + ": trace damaged at record")) << set.problems[0];
  // Its last microbatch is incomplete and its count may be short: neither is a disagreement.
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
}

TEST_F(MultiRankTest, DamagedRankStillComparedOnItsWholeMicrobatches) {
  WriteRank(0, 3);
  const std::string damaged = WriteRank(1, 3, {{{1, 0}, {3, 1}}});
  fs::resize_file(damaged, fs::file_size(damaged) - 3);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);  // a known one decides
  EXPECT_EQ(JobMessages(set),
            std::vector<std::string>{"ranks disagree in microbatch 0 (forward/backward updates): "
                                     "rank 0: 1/1; rank 1: 3/1"})
      << Describe(set);
}

TEST_F(MultiRankTest, KilledRanksUnfinishedMicrobatchIsNotCompared) {
  WriteRank(0, 3);
  TraceBuilder killed(1, 101, "nvtx");  // SIGKILL inside microbatch 2: no END, no footer
  killed.MarkedMicrobatch().MarkedMicrobatch().Begin().Forward();
  Write("testhost.101.rank1.fp8trace", killed);
  const TraceSetResult set = AuditDir();
  ASSERT_EQ(set.report.ranks_size(), 2);
  EXPECT_EQ(set.report.ranks(1).totals().microbatches(), 3u);
  EXPECT_EQ(set.report.ranks(1).totals().backward_updates(), 2u);  // 1/0 in microbatch 2
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
}

TEST_F(MultiRankTest, EmptyTraceOfARankKeepsTheRankOfItsFileName) {
  WriteRank(0, 2);
  WriteRank(2, 2);
  const std::string empty = Path("testhost.101.rank1.fp8trace");
  std::ofstream(empty, std::ios::binary);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Describe(set);
  ASSERT_EQ(set.problems.size(), 1u) << Describe(set);  // not also "no trace of rank 1"
  EXPECT_TRUE(Contains(set.problems[0], empty + ": empty trace (0 bytes)")) << set.problems[0];
  ASSERT_EQ(set.report.ranks_size(), 3);
  EXPECT_EQ(set.report.ranks(1).rank(), 1);
  EXPECT_EQ(set.report.ranks(1).path(), empty);
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
}

TEST_F(MultiRankTest, ForkedChildrenAndTracesWithoutARankAreNotRanks) {
  WriteRank(0, 2);
  WriteRank(1, 2);
  TraceBuilder child(1, 700, "nvtx");
  child.header()->set_parent_pid(101);
  for (int i = 0; i < 5; ++i) child.MarkedMicrobatch(2, 1);
  child.Footer();
  Write("testhost.700.rank1.fp8trace", child);
  TraceBuilder solo(-1, 800, "nvtx");
  solo.MarkedMicrobatch().Footer();
  Write("testhost.800.fp8trace", solo);
  const TraceSetResult set = AuditDir();
  EXPECT_TRUE(JobMessages(set).empty()) << Describe(set);
  EXPECT_TRUE(set.problems.empty());
  EXPECT_EQ(set.outcome, Outcome::kViolations);  // the child's own 2/1 microbatches
}

TEST_F(MultiRankTest, EachTracesStandingAmongTheRanksIsCarriedInTheReport) {
  WriteRank(0, 6);
  WriteRank(1, 6, {{{1, 1}, {2, 1}}, {{1, 2}, {2, 1}}, {{1, 4}, {1, 3}}});
  WriteRank(2, 5);
  const TraceSetResult set = AuditDir();
  ASSERT_EQ(set.report.ranks_size(), 3);
  const v1::RankStanding& r0 = set.report.ranks(0).standing();
  const v1::RankStanding& r1 = set.report.ranks(1).standing();
  const v1::RankStanding& r2 = set.report.ranks(2).standing();
  // Microbatches 1-2 and 4: rank 1 against ranks 0 and 2 (most ranks).
  EXPECT_EQ(r1.differing_microbatches(), 3u);
  ASSERT_EQ(r1.differing_size(), 2);
  EXPECT_EQ(r1.differing(0).first(), 1u);
  EXPECT_EQ(r1.differing(0).last(), 2u);
  EXPECT_EQ(r1.differing(1).first(), 4u);
  EXPECT_EQ(r1.differing(1).last(), 4u);
  EXPECT_EQ(r0.differing_microbatches(), 0u);
  EXPECT_EQ(r2.differing_microbatches(), 0u);
  // Rank 2 alone has 5 microbatches.
  EXPECT_FALSE(r0.count_differs());
  EXPECT_FALSE(r1.count_differs());
  EXPECT_TRUE(r2.count_differs());
  EXPECT_EQ(r0.claimed_by(), 0u);
}

TEST_F(MultiRankTest, TwoTracesOfOneRankCarryHowManyClaimIt) {
  WriteRank(0, 2, {}, 100);
  WriteRank(0, 2, {}, 300);
  WriteRank(1, 2);
  const TraceSetResult set = AuditDir();
  ASSERT_EQ(set.report.ranks_size(), 3);
  EXPECT_EQ(set.report.ranks(0).standing().claimed_by(), 2u);
  EXPECT_EQ(set.report.ranks(1).standing().claimed_by(), 2u);
  EXPECT_EQ(set.report.ranks(2).standing().claimed_by(), 0u);
}

TEST_F(MultiRankTest, NoRankSawAnUpdateIsNothingToJudge) {
  WriteJob(2, 3,
           {{{0, 0}, {0, 0}},
            {{0, 1}, {0, 0}},
            {{0, 2}, {0, 0}},
            {{1, 0}, {0, 0}},
            {{1, 1}, {0, 0}},
            {{1, 2}, {0, 0}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kNothingAudited) << Describe(set);
  EXPECT_EQ(set.problems, std::vector<std::string>{NothingToJudge("6 microbatches in 2 traces")});
}

TEST_F(MultiRankTest, OneRankWithoutUpdatesAmongRanksWithThemIsAViolation) {
  WriteJob(2, 2, {{{1, 0}, {0, 0}}, {{1, 1}, {0, 0}}});
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Describe(set);
  EXPECT_EQ(JobMessages(set),
            std::vector<std::string>{"ranks disagree in microbatches 0-1 (forward/backward "
                                     "updates): rank 0: 1/1; rank 1: 0/0"})
      << Describe(set);
  // The rank without updates is judged: it fails, each of its microbatches with it.
  ASSERT_EQ(set.report.ranks_size(), 2);
  EXPECT_EQ(set.report.ranks(1).outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  EXPECT_EQ(set.report.ranks(1).verdict(), v1::FAIL);
  EXPECT_EQ(set.report.ranks(1).totals().failing_microbatches(), 2u);
}

TEST(Ranks, RankFromFileNameAndRankList) {
  EXPECT_EQ(RankFromFileName("out/h.12.rank3.fp8trace"), 3);
  EXPECT_EQ(RankFromFileName("h.12.rank17.fp8trace"), 17);
  EXPECT_EQ(RankFromFileName("h.12.fp8trace"), -1);
  EXPECT_EQ(RankFromFileName("h.12.rankx.fp8trace"), -1);
  EXPECT_EQ(RankFromFileName("h.12.rank3.txt"), -1);
  EXPECT_EQ(RankFromFileName("h.12.rank99999999999.fp8trace"), -1);
  EXPECT_EQ(RankList({5}), "rank 5");
  EXPECT_EQ(RankList({7, 6, 0, 1, 2, 3, 4}), "ranks 0-4, 6, 7");
  EXPECT_EQ(RankList({0, 1}), "ranks 0, 1");
  EXPECT_EQ(RankList({0, 2, 4, 5, 6}), "ranks 0, 2, 4-6");
  std::vector<int32_t> odd;
  for (int32_t r = 1; r < 100; r += 2) odd.push_back(r);
  EXPECT_EQ(RankList(odd),
            "ranks 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39 and "
            "30 more in 30 ranges");
}

TEST_F(MultiRankTest, TextAndMarkdownShowAPerRankTableAndTheDisagreement) {
  WriteRank(0, 3);
  WriteRank(1, 3, {{{1, 1}, {2, 3}}});
  WriteRank(3, 3);
  const TraceSetResult set = AuditDir();
  const std::string text = RenderText(set.report, RenderOptions{});
  EXPECT_TRUE(Contains(text,
                       "ranks:\n"
                       "  rank  host      pid  microbatches  failing  forward  backward  verdict  "
                       "note\n"
                       "     0  testhost  100             3        0        3         3  PASS\n"
                       "     1  testhost  101             3        1        4         5  FAIL\n"
                       "     2  -           -             -        -        -         -  missing  "
                       "no trace\n"
                       "     3  testhost  103             3        0        3         3  PASS\n"))
      << text;
  // The job's violations come right after the table, before the ranks' own sections.
  const size_t job = text.find("job violations:\n  no trace of rank 2 (traces of ranks 0, 1, 3)");
  ASSERT_NE(job, std::string::npos) << text;
  EXPECT_LT(job, text.find("== rank 0"));
  EXPECT_TRUE(Contains(text,
                       "  ranks disagree in microbatch 1 (forward/backward updates): ranks 0, 3: "
                       "1/1; rank 1: 2/3 [rank disagreement]\n"))
      << text;

  const std::string md = RenderMarkdown(set.report, RenderOptions{});
  EXPECT_TRUE(Contains(md, "| rank 1 (testhost, pid 101) | 3 | 1 | 4 | 5 | **FAIL** | |")) << md;
  EXPECT_TRUE(Contains(md, "| rank 2 | - | - | - | - | **missing** | no trace |")) << md;
  EXPECT_TRUE(Contains(md,
                       "- **ranks disagree in microbatch 1 (forward/backward updates): ranks 0, "
                       "3: 1/1; rank 1: 2/3** (rank disagreement)"))
      << md;
}

TEST_F(MultiRankTest, TableNotesForkedDuplicateAndDamagedTraces) {
  WriteRank(0, 2, {}, 100);
  WriteRank(0, 2, {}, 300);
  TraceBuilder child(0, 700, "nvtx");
  child.header()->set_parent_pid(100);
  child.Footer();
  Write("testhost.700.rank0.fp8trace", child);
  const std::string damaged = WriteRank(1, 2);
  fs::resize_file(damaged, fs::file_size(damaged) - 3);
  const TraceSetResult set = AuditDir();
  const std::string text = RenderText(set.report, RenderOptions{});
  EXPECT_TRUE(Contains(text,
                       "  100             2        0        2         2  PASS        "
                       "claimed by 2 traces\n"))
      << text;
  EXPECT_TRUE(Contains(text,
                       "  700             0        0        0         0  PASS        "
                       "forked from pid 100, no microbatches\n"))
      << text;
  // Its damage is its only violation: INCOMPLETE, not FAIL, and no note repeating it.
  EXPECT_TRUE(Contains(text, "         2  INCOMPLETE\n")) << text;
}

TEST_F(MultiRankTest, SingleTraceHasNoRankTable) {
  WriteRank(0, 2);
  const std::string text = RenderText(AuditDir().report, RenderOptions{});
  EXPECT_FALSE(Contains(text, "ranks:")) << text;
}

// ---- Progress
// ------------------------------------------------------------------------------------

TEST_F(TraceSetTest, ProgressHookFollowsEveryFileRecordByRecord) {
  const std::string big = Path("big.fp8trace");
  {
    std::string error;
    auto writer = TraceFileWriter::Create(big, &error);
    ASSERT_NE(writer, nullptr);
    TraceBuilder head(0, 1, "nvtx");
    writer->Write(head.records()[0]);
    std::string chunk;
    for (int i = 0; i < 20000; ++i) {
      TraceBuilder mb(0, 1, "nvtx");
      mb.MarkedMicrobatch();
      for (size_t k = 1; k < mb.records().size(); ++k) AppendRecord(mb.records()[k], &chunk);
    }
    writer->WriteFramed(chunk);
  }
  TraceBuilder small(1, 2, "nvtx");
  small.MarkedMicrobatch().Footer();
  const std::string little = Write("small.fp8trace", small);
  const std::string empty = Path("empty.fp8trace");
  std::ofstream(empty, std::ios::binary);

  struct Call {
    size_t file;
    uint64_t bytes;
    bool done;
  };
  std::vector<Call> calls;
  uint64_t microbatches_before_done = 0;
  TraceSetOptions options;
  options.on_progress = [&](size_t file, uint64_t bytes, bool done) {
    calls.push_back({file, bytes, done});
  };
  const std::vector<std::string> files = {big, little, empty};
  AuditTraceFiles(files, options);
  ASSERT_GE(calls.size(), 6u);
  // Each file: a start at 0 bytes, growing reads, then done with every byte read.
  size_t at = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    ASSERT_LT(at, calls.size());
    EXPECT_EQ(calls[at].file, f);
    EXPECT_EQ(calls[at].bytes, 0u);
    EXPECT_FALSE(calls[at].done);
    size_t reads = 0;
    for (++at; at < calls.size() && !calls[at].done; ++at, ++reads) {
      EXPECT_EQ(calls[at].file, f);
      EXPECT_GE(calls[at].bytes, calls[at - 1].bytes);
    }
    ASSERT_LT(at, calls.size());
    EXPECT_EQ(calls[at].file, f);
    EXPECT_EQ(calls[at].bytes, fs::file_size(files[f])) << f;
    if (f == 0) {
      // The big trace (several MiB) is reported while it is being read, not only at its end.
      EXPECT_GT(fs::file_size(big), 4u << 20);
      EXPECT_GE(reads, fs::file_size(big) / (512 << 10)) << reads;
    }
    ++at;
  }
  EXPECT_EQ(at, calls.size());

  // on_microbatch sees every microbatch, also those max_rows does not keep.
  options.on_progress = nullptr;
  options.max_rows = 5;
  options.on_microbatch = [&](const v1::MicrobatchResult&) { ++microbatches_before_done; };
  std::string problem;
  const v1::RankReport r = AuditTraceFile(big, options, &problem);
  EXPECT_EQ(microbatches_before_done, 20000u);
  EXPECT_EQ(r.microbatches_size(), 0);  // all pass: rows were not kept past max_rows
}

TEST_F(MultiRankTest, CallersMicrobatchHookSeesEveryTrace) {
  WriteJob(3, 4);
  int microbatches = 0;
  TraceSetOptions options;
  options.max_rows = 1;
  options.on_microbatch = [&](const v1::MicrobatchResult&) { ++microbatches; };
  EXPECT_EQ(AuditDir(options).outcome, Outcome::kPass);
  EXPECT_EQ(microbatches, 12);
}

class FakeTerminal {
 public:
  uint64_t now_ns = 0;
  std::string written;
  ReadProgress Make(std::vector<uint64_t> sizes, ProgressMode mode) {
    return ReadProgress(
        "fp8audit report", std::move(sizes), mode, [this](std::string_view s) { written += s; },
        [this] { return now_ns; });
  }
};

constexpr uint64_t kMs = 1000000;

TEST(ReadProgress, QuietWhenOff) {
  FakeTerminal term;
  {
    ReadProgress p = term.Make({100, 200}, ProgressMode::kOff);
    for (int i = 0; i < 10; ++i) {
      term.now_ns += 1000 * kMs;
      p.Update(0, 10 * i, false);
    }
    p.Update(0, 100, true);
    p.Finish();
  }
  EXPECT_EQ(term.written, "");
}

TEST(ReadProgress, TerminalLineIsRedrawnInPlaceAtMostTenTimesASecondAndErased) {
  FakeTerminal term;
  ReadProgress p = term.Make({3u << 20, 1u << 20}, ProgressMode::kTerminal);
  p.Update(0, 0, false);
  term.now_ns = 100 * kMs;
  p.Update(0, 1u << 20, false);
  EXPECT_EQ(term.written, "") << "nothing for a quick read";
  term.now_ns = 500 * kMs;
  p.Update(0, 2u << 20, false);
  EXPECT_EQ(term.written,
            "\rfp8audit report: 0/2 traces, 2.0 MiB of 4.0 MiB (50%), 4.0 MiB/s, "
            "0.5 s left\x1b[K");
  term.written.clear();
  term.now_ns = 550 * kMs;
  p.Update(0, 3u << 20, true);
  EXPECT_EQ(term.written, "") << "within 100 ms of the last line";
  term.now_ns = 1000 * kMs;
  p.Update(1, 512u << 10, false);
  EXPECT_EQ(term.written,
            "\rfp8audit report: 1/2 traces, 3.5 MiB of 4.0 MiB (87%), 3.5 MiB/s, "
            "0.1 s left\x1b[K");
  term.written.clear();
  p.Update(1, 1u << 20, true);
  p.Finish();
  EXPECT_EQ(term.written, "\r\x1b[K");
  term.written.clear();
  p.Finish();
  EXPECT_EQ(term.written, "");
}

TEST(ReadProgress, NothingToEraseWhenNothingWasDrawn) {
  FakeTerminal term;
  ReadProgress p = term.Make({10}, ProgressMode::kTerminal);
  p.Update(0, 10, true);
  p.Finish();
  EXPECT_EQ(term.written, "");
}

TEST(ReadProgress, LinesModeWritesWholeLinesAboutEachSecondAndASummary) {
  FakeTerminal term;
  ReadProgress p = term.Make({2u << 30, 2u << 30}, ProgressMode::kLines);
  p.Update(0, 0, false);
  term.now_ns = 600 * kMs;
  p.Update(0, 1u << 30, false);
  EXPECT_EQ(term.written, "");
  term.now_ns = 2000 * kMs;
  p.Update(0, 2u << 30, true);
  EXPECT_EQ(term.written,
            "fp8audit report: 1/2 traces, 2.0 GiB of 4.0 GiB (50%), 1.0 GiB/s, "
            "2.0 s left\n");
  term.written.clear();
  term.now_ns = 2500 * kMs;
  p.Update(1, 1u << 30, false);
  EXPECT_EQ(term.written, "");
  term.now_ns = 4000 * kMs;
  p.Update(1, 2u << 30, true);
  p.Finish();
  EXPECT_EQ(term.written,
            "fp8audit report: 2/2 traces, 4.0 GiB of 4.0 GiB (100%), 1.0 GiB/s\n"
            "fp8audit report: read 2 traces, 4.0 GiB in 4.0 s (1.0 GiB/s)\n");
}

TEST(ReadProgress, AGrowingFileNeverShowsMoreThanAllOfIt) {
  FakeTerminal term;
  ReadProgress p = term.Make({1000}, ProgressMode::kLines);
  term.now_ns = 2000 * kMs;
  p.Update(0, 1500, false);  // the file grew since its size was taken
  EXPECT_EQ(term.written, "fp8audit report: 0/1 traces, 1.5 KiB of 1.5 KiB (100%), 750 B/s\n");
}

TEST(ReadProgress, ModeFromFlagsAndTerminal) {
  EXPECT_EQ(ChooseProgressMode(std::nullopt, /*tty=*/true, "xterm"), ProgressMode::kTerminal);
  EXPECT_EQ(ChooseProgressMode(std::nullopt, true, "dumb"), ProgressMode::kOff);
  EXPECT_EQ(ChooseProgressMode(std::nullopt, false, "xterm"), ProgressMode::kOff);
  EXPECT_EQ(ChooseProgressMode(true, false, nullptr), ProgressMode::kLines);
  EXPECT_EQ(ChooseProgressMode(true, true, "xterm"), ProgressMode::kTerminal);
  EXPECT_EQ(ChooseProgressMode(true, true, "dumb"), ProgressMode::kLines);
  EXPECT_EQ(ChooseProgressMode(false, true, "xterm"), ProgressMode::kOff);
}

}  // namespace
}  // namespace fp8audit::reports
