// reports/findings.h: problems of the same kind and cause collapse into one finding with the
// microbatch ranges they cover; past the caps the ranges are marked cut and new causes counted.
#include "reports/findings.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using Kind = v1::Violation::Kind;

v1::RankReport Built(const FindingsBuilder& b) {
  v1::RankReport r;
  b.WriteTo(&r);
  return r;
}

TEST(Findings, TheSameCauseInConsecutiveMicrobatchesIsOneRange) {
  FindingsBuilder b;
  for (uint32_t i = 0; i < 600; ++i)
    b.Add(v1::Violation::BACKWARD_COUNT, i, i / 8, "3 up", nullptr);
  const v1::RankReport r = Built(b);
  ASSERT_EQ(r.findings_size(), 1);
  EXPECT_EQ(r.findings(0).count(), 600u);
  EXPECT_EQ(FindingWhere(r.findings(0)), "microbatches 0-599 (600)");
}

TEST(Findings, KindAndCauseTellFindingsApartInTheOrderFirstSeen) {
  FindingsBuilder b;
  b.Add(v1::Violation::FORWARD_COUNT, 0, 0, "2 forward", nullptr);
  b.Add(v1::Violation::BACKWARD_COUNT, 0, 0, "2 forward", nullptr);  // another kind
  b.Add(v1::Violation::FORWARD_COUNT, 1, 0, "3 forward", nullptr);
  b.Add(v1::Violation::FORWARD_COUNT, 2, 0, "2 forward", nullptr);
  b.Add(v1::Violation::FORWARD_COUNT, 5, 1, "2 forward", nullptr);
  const v1::RankReport r = Built(b);
  ASSERT_EQ(r.findings_size(), 3);
  EXPECT_EQ(FindingWhere(r.findings(0)), "microbatches 0, 2, 5 (3)");
  EXPECT_EQ(r.findings(1).kind(), v1::Violation::BACKWARD_COUNT);
  EXPECT_EQ(FindingWhere(r.findings(1)), "microbatch 0 (step 0)");
  EXPECT_EQ(FindingWhere(r.findings(2)), "microbatch 1 (step 0)");
}

TEST(Findings, TheFirstMicrobatchWithAnExplanationExplainsTheFinding) {
  FindingsBuilder b;
  google::protobuf::RepeatedPtrField<std::string> lines;
  b.Add(v1::Violation::FORWARD_COUNT, 0, 0, "2 forward", &lines);  // empty: no explanation
  lines.Add("an extra update in the recompute of frame 1");
  b.Add(v1::Violation::FORWARD_COUNT, 1, 0, "2 forward", &lines);
  lines.Add("another line");
  b.Add(v1::Violation::FORWARD_COUNT, 2, 0, "2 forward", &lines);
  const v1::Finding f = Built(b).findings(0);
  EXPECT_EQ(f.explained_microbatch(), 1u);
  ASSERT_EQ(f.explanations_size(), 1);
  EXPECT_EQ(f.explanations(0), "an extra update in the recompute of frame 1");
}

TEST(Findings, PastTheRangeCapTheFindingCountsOnAndSaysItWasCut) {
  FindingsBuilder b;
  for (uint32_t i = 0; i < 1000; i += 2) b.Add(v1::Violation::FORWARD_COUNT, i, 0, "x", nullptr);
  const v1::Finding f = Built(b).findings(0);
  EXPECT_EQ(f.microbatches_size(), FindingsBuilder::kMaxRanges);
  EXPECT_TRUE(f.ranges_cut());
  EXPECT_EQ(f.count(), 500u);
  const std::string where = FindingWhere(f);
  EXPECT_EQ(where.substr(where.size() - 11), ", ... (500)") << where;
}

TEST(Findings, PastTheFindingCapNewCausesAreCountedAsDropped) {
  FindingsBuilder b;
  for (uint32_t i = 0; i < FindingsBuilder::kMaxFindings + 3; ++i) {
    b.Add(v1::Violation::FORWARD_COUNT, i, 0, std::to_string(i) + " forward", nullptr);
  }
  EXPECT_EQ(Built(b).findings_size(), static_cast<int>(FindingsBuilder::kMaxFindings));
  EXPECT_EQ(b.dropped(), 3u);
}

// A microbatch wrong in both directions gives two findings; each one's explanation speaks of its
// own direction (issue 35: the backward finding listed the forward explanations).
TEST(Findings, EachCountFindingIsExplainedByItsOwnDirectionOnly) {
  testing::TraceBuilder t;
  t.MarkedMicrobatch(3, 2);
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.findings_size(), 2) << r.DebugString();
  for (const v1::Finding& f : r.findings()) {
    const bool forward = f.kind() == v1::Violation::FORWARD_COUNT;
    const std::string own = forward ? "forward update" : "backward update";
    const std::string other = forward ? "backward update" : "forward update";
    ASSERT_GT(f.explanations_size(), 0) << f.DebugString();
    bool own_seen = false;
    for (const std::string& line : f.explanations()) {
      EXPECT_EQ(line.find(other), std::string::npos) << f.cause() << ": " << line;
      own_seen = own_seen || line.find(own) != std::string::npos;
    }
    EXPECT_TRUE(own_seen) << f.DebugString();
  }
}

}  // namespace
}  // namespace fp8audit::reports
