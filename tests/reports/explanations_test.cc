// The auditor's words apart from the audit: row labels, causes, the chosen model semantics and
// the advice they come with, the trace's notes.
#include "reports/explanations.h"

#include <gtest/gtest.h>

namespace fp8audit {
namespace {

using reports::ChooseSemantics;
using reports::ChosenSemantics;
using reports::RecordingFacts;

TEST(Explanations, ARowLabelNamesItsIdOnlyWhenKeyed) {
  v1::MicrobatchResult row;
  row.set_index(3);
  row.set_step(1);
  EXPECT_EQ(reports::RowLabel(row), "microbatch 3 (step 1): ");
  row.set_microbatch_id(7);
  EXPECT_EQ(reports::RowLabel(row), "microbatch 3 (id 7, step 1): ");
}

TEST(Explanations, ACountCauseSaysCountExpectationAndAnIncompleteMicrobatch) {
  EXPECT_EQ(reports::CountCause(2, 1, 0, /*complete=*/true, /*frozen=*/false),
            "2 forward updates, expected 1");
  EXPECT_EQ(reports::CountCause(1, 2, 1, /*complete=*/false, /*frozen=*/false),
            "1 backward update, expected 2 (incomplete microbatch)");
}

TEST(Explanations, TheFlagChoosesTheSemanticsBeforeThePatchAndThePatchBeforeTeVersion) {
  v1::Recording rec;
  EXPECT_TRUE(ChooseSemantics("", rec).name.empty());
  rec.set_te_patched(true);
  const ChosenSemantics patched = ChooseSemantics("", rec);
  EXPECT_EQ(patched.name, "fixed");
  EXPECT_EQ(patched.from, "patch");
  const ChosenSemantics flagged = ChooseSemantics("no-such-semantics", rec);
  EXPECT_EQ(flagged.name, "no-such-semantics");
  EXPECT_EQ(flagged.from, "flag");
}

TEST(Explanations, TheSemanticsLineSaysWhereTheChoiceCameFromAndNothingWithoutOne) {
  EXPECT_EQ(reports::SemanticsLine({}, "2.1"), "");
  const std::string line = reports::SemanticsLine({"fixed", "flag"}, "");
  EXPECT_EQ(line.rfind("model semantics fixed (--semantics): ", 0), 0u) << line;
  const std::string patched = reports::SemanticsLine({"fixed", "patch"}, "2.1");
  EXPECT_NE(patched.find("(TE 2.1 patched by fp8audit.te)"), std::string::npos) << patched;
}

TEST(Explanations, UnbalancedMarkersNameTheMicrobatchesConcerned) {
  EXPECT_EQ(reports::UnbalancedMessage(reports::Unbalance::kBeginWithoutEnd, 4),
            "microbatch 5 began while microbatch 4 had no end marker");
  EXPECT_EQ(reports::UnbalancedMessage(reports::Unbalance::kEndBeforeBegin, 0),
            "microbatch end marker before any begin marker");
}

TEST(Explanations, AMissingFooterNamesTheUnfinishedMicrobatchOrTheLastWholeOne) {
  EXPECT_EQ(reports::MissingFooterText(7, 0, 1),
            "trace ends without a footer (the process was killed?): microbatch 7 unfinished");
  EXPECT_EQ(reports::MissingFooterText(6, 1, 0),
            "trace ends without a footer (the process was killed?) after microbatch 6");
  EXPECT_EQ(reports::MissingFooterText(0, 0, 0),
            "trace ends without a footer (the process was killed?) before its first microbatch");
}

TEST(Explanations, RecordingNotesListTheFirstFiveMicrobatchesOfMany) {
  RecordingFacts facts;
  for (uint32_t i = 0; i < 7; ++i) facts.disagreeing.Add(i * 2);
  v1::Recording rec;
  reports::AddRecordingNotes(facts, &rec);
  ASSERT_EQ(rec.notes_size(), 1);
  EXPECT_EQ(rec.notes(0), "probes disagree in 7 microbatches (0, 2, 4, 6, 8, ...)");
}

TEST(Explanations, NoNotesForATraceWithNothingToSay) {
  v1::Recording rec;
  reports::AddRecordingNotes(RecordingFacts{}, &rec);
  EXPECT_EQ(rec.notes_size(), 0);
}

}  // namespace
}  // namespace fp8audit
