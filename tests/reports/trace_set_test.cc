#include "reports/trace_set.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;
using testing::TraceBuilder;

class TraceSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("fp8audit-trace-set-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Write(const std::string& name, const TraceBuilder& t) const {
    const std::string p = Path(name);
    EXPECT_TRUE(t.Write(p));
    return p;
  }

  fs::path dir_;
};

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
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
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);  // damage beats the violation in microbatch 1
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
  u.MarkedMicrobatch(0, 0).Footer();  // no expectation recorded: 1/1
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
    for (int i = 0; i < 20000; ++i) {
      TraceBuilder mb(0, 1, "nvtx");
      mb.MarkedMicrobatch(1, i == 12345 ? 5 : 1);
      for (size_t k = 1; k < mb.records().size(); ++k) AppendRecord(mb.records()[k], &chunk);
    }
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

}  // namespace
}  // namespace fp8audit::reports
