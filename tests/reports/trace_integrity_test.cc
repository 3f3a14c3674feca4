// Traces whose records disagree with what their writer says about them: a footer whose event count
// does not match the event records read (records deleted, repeated, or a count made up), and a
// header whose schema version no writer uses. Each is damage: one line, the audit incomplete.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proto/trace_io.h"
#include "reports/trace_set.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;
using testing::TraceBuilder;

class TraceIntegrityTest : public ::testing::Test {
 protected:
  // Writes `records` as a trace file, framed as the agent frames them.
  std::string Write(const std::string& name, const std::vector<v1::TraceRecord>& records) const {
    std::string bytes;
    for (const v1::TraceRecord& r : records) AppendRecord(r, &bytes);
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  testutil::TempDir tmp_{"fp8audit-trace-integrity-"};
  const fs::path dir_{tmp_.path()};
};

// Three passing microbatches (the middle one's events are records 1 + kPerMicrobatch ...) and a
// footer that counts them.
std::vector<v1::TraceRecord> ThreeMicrobatches() {
  TraceBuilder t(0, 77, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch().MarkedMicrobatch().Footer();
  return t.records();
}

// The byte offset at which record `index` (0: the header) starts.
uint64_t OffsetOf(const std::vector<v1::TraceRecord>& records, size_t index) {
  std::string bytes;
  for (size_t i = 0; i < index; ++i) AppendRecord(records[i], &bytes);
  return bytes.size();
}

TEST_F(TraceIntegrityTest, AFooterThatCountsTheEventsReadIsWhole) {
  const std::string path = Write("whole.fp8trace", ThreeMicrobatches());
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kPass);
  EXPECT_TRUE(set.problems.empty());
}

TEST_F(TraceIntegrityTest, AFooterClaimingMoreEventsThanTheTraceHoldsIsDamage) {
  std::vector<v1::TraceRecord> records = ThreeMicrobatches();
  const uint64_t events = records.size() - 2;
  records.back().mutable_footer()->set_events(1000000);
  const std::string path = Write("claims.fp8trace", records);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.problems,
            std::vector<std::string>{
                path + ": trace damaged at record " + std::to_string(records.size()) + " at byte " +
                std::to_string(OffsetOf(records, records.size() - 1)) +
                ": the footer counts 1000000 events, the trace holds " + std::to_string(events) +
                " (event records lost, repeated or added); the " +
                std::to_string(records.size() - 1) + " whole records before it are reported"});
  const v1::RankReport& r = set.report.ranks(0);
  EXPECT_FALSE(r.damage().empty());
  EXPECT_EQ(r.totals().microbatches(), 3u);  // every record read is still reported
}

TEST_F(TraceIntegrityTest, AMicrobatchWhoseRecordsWereDeletedIsDamage) {
  std::vector<v1::TraceRecord> records = ThreeMicrobatches();
  const size_t per_microbatch = (records.size() - 2) / 3;
  records.erase(records.begin() + 1 + static_cast<ptrdiff_t>(per_microbatch),
                records.begin() + 1 + static_cast<ptrdiff_t>(2 * per_microbatch));
  const std::string path = Write("deleted.fp8trace", records);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  ASSERT_EQ(set.problems.size(), 1u);
  EXPECT_NE(set.problems[0].find("the footer counts " + std::to_string(3 * per_microbatch) +
                                 " events, the trace holds " + std::to_string(2 * per_microbatch)),
            std::string::npos)
      << set.problems[0];
}

TEST_F(TraceIntegrityTest, EveryEventRepeatedIsDamage) {
  const std::vector<v1::TraceRecord> original = ThreeMicrobatches();
  std::vector<v1::TraceRecord> records = {original.front()};
  for (size_t i = 1; i + 1 < original.size(); ++i) {
    records.push_back(original[i]);
    records.push_back(original[i]);
  }
  records.push_back(original.back());
  const std::string path = Write("repeated.fp8trace", records);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  ASSERT_EQ(set.problems.size(), 1u);
  const uint64_t events = original.size() - 2;
  EXPECT_NE(set.problems[0].find("the footer counts " + std::to_string(events) +
                                 " events, the trace holds " + std::to_string(2 * events)),
            std::string::npos)
      << set.problems[0];
}

TEST_F(TraceIntegrityTest, SchemaVersionZeroIsRefused) {
  std::vector<v1::TraceRecord> records = ThreeMicrobatches();
  records.front().mutable_header()->set_schema_version(0);
  const std::string path = Write("zero.fp8trace", records);
  const TraceSetResult set = AuditTraceFiles({path}, TraceSetOptions{});
  EXPECT_EQ(set.outcome, Outcome::kIncomplete);
  EXPECT_EQ(set.problems, std::vector<std::string>{
                              path + ": not an fp8audit trace: its header's schema version is 0 "
                                     "(fp8audit's traces have 1 or later)"});
  EXPECT_EQ(set.report.ranks(0).totals().microbatches(), 0u);
}

}  // namespace
}  // namespace fp8audit::reports
