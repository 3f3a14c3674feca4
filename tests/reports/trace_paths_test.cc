// What a set of traces amounts to where it is odd: ranks missing below the lowest present,
// traces in subdirectories (one per node), byte-identical copies, and a violation beside an
// incomplete trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reports/trace_set.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;
using reports::AuditTraceFiles;
using reports::ExpandTracePaths;
using reports::Outcome;
using reports::TraceSetOptions;
using reports::TraceSetResult;
using testing::Contains;
using testing::TraceBuilder;

class TracePathsTest : public ::testing::Test {
 protected:
  // Writes DIR/<sub>/testhost.<pid>.rank<r>.fp8trace: two passing microbatches (`fail`: the
  // second makes two forward updates), or a forked child's trace when parent_pid is set.
  std::string WriteRank(int rank, int pid, const std::string& sub = "", bool fail = false,
                        uint32_t parent_pid = 0) {
    TraceBuilder t(rank, pid, "nvtx");
    t.header()->set_parent_pid(parent_pid);
    t.MarkedMicrobatch().MarkedMicrobatch(fail ? 2 : 1, 1).Footer();
    const fs::path d = sub.empty() ? dir_ : dir_ / sub;
    fs::create_directories(d);
    const std::string p =
        (d / ("testhost." + std::to_string(pid) + ".rank" + std::to_string(rank) + ".fp8trace"))
            .string();
    EXPECT_TRUE(t.Write(p));
    return p;
  }

  TraceSetResult AuditDir(std::vector<std::string>* notes = nullptr) {
    std::vector<std::string> files, skipped;
    std::string error;
    EXPECT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error, &skipped)) << error;
    if (notes != nullptr) *notes = skipped;
    return AuditTraceFiles(files, TraceSetOptions{});
  }

  testutil::TempDir tmp_{"fp8audit-paths-"};
  const fs::path dir_{tmp_.path()};
};

std::string Problems(const TraceSetResult& set) {
  std::string all;
  for (const std::string& p : set.problems) all += p + "\n";
  return all;
}

TEST_F(TracePathsTest, OneRankAboveZeroAloneMissesTheRanksBelowIt) {
  WriteRank(3, 103);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Problems(set);
  EXPECT_EQ(set.problems, std::vector<std::string>{
                              "no trace of ranks 0-2 (3 ranks; traces of rank 3): the audit is "
                              "incomplete; did those ranks write their traces elsewhere, or end "
                              "before their first kernel launch?"});
  ASSERT_EQ(set.report.missing_ranks_size(), 1);
  EXPECT_EQ(set.report.missing_ranks(0).first(), 0);
  EXPECT_EQ(set.report.missing_ranks(0).last(), 2);
}

TEST_F(TracePathsTest, ARankPresentOnlyAsAForkedChildIsMissing) {
  WriteRank(0, 150, "", false, /*parent_pid=*/149);  // rank 0's forked worker, not rank 0
  WriteRank(2, 102);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kIncomplete) << Problems(set);
  EXPECT_TRUE(Contains(Problems(set), "no trace of ranks 0, 1 (2 ranks; traces of rank 2)"))
      << Problems(set);
}

TEST_F(TracePathsTest, RankZeroAloneOrNoRankIsWhole) {
  WriteRank(0, 100);
  EXPECT_EQ(AuditDir().outcome, Outcome::kPass);
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  WriteRank(-1, 100);
  EXPECT_EQ(AuditDir().outcome, Outcome::kPass);
}

TEST_F(TracePathsTest, TracesInSubdirectoriesOneMorePerNodeAreRead) {
  WriteRank(0, 100, "node0");
  WriteRank(1, 101, "node0");
  WriteRank(2, 102, "node1");
  WriteRank(3, 103, "node1/late");
  std::vector<std::string> notes;
  const TraceSetResult set = AuditDir(&notes);
  EXPECT_EQ(set.outcome, Outcome::kPass) << Problems(set);
  EXPECT_EQ(set.report.ranks_size(), 4);
  EXPECT_TRUE(notes.empty());
}

TEST_F(TracePathsTest, SubdirectoriesPastTheDepthLimitAreNotedNotRead) {
  WriteRank(0, 100);
  std::string deep;
  for (int i = 0; i < 9; ++i) deep += (deep.empty() ? "" : "/") + std::string("d");
  WriteRank(1, 101, deep);
  std::vector<std::string> notes;
  const TraceSetResult set = AuditDir(&notes);
  EXPECT_EQ(set.report.ranks_size(), 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(Contains(notes[0], "not read: subdirectories more than 8 levels deep")) << notes[0];
}

TEST_F(TracePathsTest, AByteIdenticalCopyIsCountedOnceAndNoted) {
  const std::string a = WriteRank(0, 100);
  WriteRank(1, 101);
  const std::string copy = (dir_ / "z-copy-of-rank0.fp8trace").string();  // read after a
  fs::copy_file(a, copy);
  std::vector<std::string> notes;
  const TraceSetResult set = AuditDir(&notes);
  EXPECT_EQ(set.outcome, Outcome::kPass) << Problems(set);
  EXPECT_EQ(set.report.ranks_size(), 2);
  EXPECT_EQ(set.report.totals().microbatches(), 4u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], copy + ": the same bytes as " + a + ": read once");
  // Named twice as copies: the same.
  std::vector<std::string> files, skipped;
  std::string error;
  ASSERT_TRUE(ExpandTracePaths({a, copy}, &files, &error, &skipped)) << error;
  EXPECT_EQ(files, std::vector<std::string>{a});
  EXPECT_EQ(skipped.size(), 1u);
}

TEST_F(TracePathsTest, ManyCopiesAreNamedUpToTwentyThenCounted) {
  const std::string a = WriteRank(0, 100);
  for (int i = 0; i < 30; ++i) fs::copy_file(a, dir_ / ("z" + std::to_string(i) + ".fp8trace"));
  std::vector<std::string> files, skipped;
  std::string error;
  ASSERT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error, &skipped)) << error;
  EXPECT_EQ(files, std::vector<std::string>{a});
  ASSERT_EQ(skipped.size(), 21u);
  EXPECT_EQ(skipped[20], "... and 10 more copies of traces before them: read once");
}

TEST_F(TracePathsTest, FilesAlikeButForTheirLastByteAreAllRead) {
  // 64 KiB and more in common, of one size: told apart by their whole bytes, each kept.
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    std::string bytes(100 << 10, 'x');
    bytes.back() = static_cast<char>('A' + i);
    names.push_back((dir_ / ("f" + std::to_string(100 + i) + ".fp8trace")).string());
    std::ofstream(names.back(), std::ios::binary) << bytes;
  }
  std::vector<std::string> files, skipped;
  std::string error;
  ASSERT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error, &skipped)) << error;
  EXPECT_EQ(files, names);
  EXPECT_TRUE(skipped.empty());
}

TEST_F(TracePathsTest, TracesOfTheSameSizeThatDifferAreBothRead) {
  const std::string a = WriteRank(0, 100);
  const std::string b = WriteRank(0, 101);  // same size, other pid: two claims of rank 0
  ASSERT_EQ(fs::file_size(a), fs::file_size(b));
  std::vector<std::string> notes;
  const TraceSetResult set = AuditDir(&notes);
  EXPECT_EQ(set.report.ranks_size(), 2);
  EXPECT_TRUE(notes.empty());
}

TEST_F(TracePathsTest, AKnownViolationDecidesEvenWhereAnotherTraceIsIncomplete) {
  WriteRank(0, 100, "", /*fail=*/true);
  const std::string b = WriteRank(1, 101);
  fs::resize_file(b, fs::file_size(b) - 1);  // damaged
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Problems(set);
  EXPECT_EQ(set.report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  EXPECT_EQ(set.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  EXPECT_EQ(set.report.ranks(1).outcome(), v1::AuditReport::OUTCOME_INCOMPLETE);
  EXPECT_TRUE(Contains(Problems(set), "trace damaged at")) << Problems(set);  // still said
}

TEST_F(TracePathsTest, AViolationBeforeTheDamageOfItsOwnTraceDecides) {
  const std::string a = WriteRank(0, 100, "", /*fail=*/true);
  fs::resize_file(a, fs::file_size(a) - 1);
  const TraceSetResult set = AuditDir();
  EXPECT_EQ(set.outcome, Outcome::kViolations) << Problems(set);
  EXPECT_EQ(set.report.ranks(0).outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
}

}  // namespace
}  // namespace fp8audit
