#include "fp8audit/vocabulary.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace fp8audit {
namespace {

TEST(Vocabulary, EveryNameParsesBackToItsValue) {
  for (CheckpointKind k : {CheckpointKind::kReentrant, CheckpointKind::kNonReentrant}) {
    EXPECT_EQ(ParseCheckpointKind(CheckpointKindName(k)), k);
  }
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kHybrid}) {
    EXPECT_EQ(ParseFp8Format(Fp8FormatName(f)), f);
  }
  for (Fp8Type t : {Fp8Type::kE4M3, Fp8Type::kE5M2}) EXPECT_EQ(ParseFp8Type(Fp8TypeName(t)), t);
  for (Probe p : kProbes) EXPECT_EQ(ParseProbe(ProbeName(p)), p);
  for (ProbeMode m : kProbeModes) EXPECT_EQ(ParseProbeMode(ProbeModeName(m)), m);
}

TEST(Vocabulary, EarlierSpellingsStillParseButAreNeverWritten) {
  EXPECT_EQ(ParseCheckpointKind("non_reentrant"), CheckpointKind::kNonReentrant);
  EXPECT_EQ(CheckpointKindName(CheckpointKind::kNonReentrant), "non-reentrant");
  EXPECT_EQ(ParseProbe("cupti"), Probe::kKernel);
  EXPECT_EQ(ProbeName(Probe::kKernel), "kernel");
  EXPECT_EQ(ParseProbeMode("te"), ProbeMode::kTeCall);
  EXPECT_EQ(ParseProbeMode("cupti"), ProbeMode::kKernel);
  EXPECT_EQ(ParseProbeMode(""), ProbeMode::kAuto);
  EXPECT_EQ(ParseFp8Format("HYBRID"), Fp8Format::kHybrid);
}

TEST(Vocabulary, UnknownNamesAreRefused) {
  EXPECT_FALSE(ParseCheckpointKind("Reentrant"));
  EXPECT_FALSE(ParseCheckpointKind(""));
  EXPECT_FALSE(ParseFp8Format("e5m2"));  // an element type, not a recipe format
  EXPECT_FALSE(ParseFp8Type("hybrid"));
  EXPECT_FALSE(ParseProbe("nvtx"));
  EXPECT_FALSE(ParseProbeMode("te-call,kernel"));
}

TEST(Vocabulary, ProbeModeNamesListEveryMode) {
  std::string_view list = kProbeModeNames;
  for (ProbeMode m : kProbeModes) {
    EXPECT_NE(list.find(ProbeModeName(m)), std::string_view::npos) << ProbeModeName(m);
  }
}

TEST(Vocabulary, ProbeNamesNameTheSetBitsInProbeOrder) {
  EXPECT_EQ(ProbeNames(ProbeBit(Probe::kPythonHook) | ProbeBit(Probe::kTeCall)),
            (std::vector<std::string>{"te-call", "python-hook"}));
  EXPECT_TRUE(ProbeNames(0).empty());
}

TEST(Vocabulary, AProbeModeUsesOnlyItsProbes) {
  EXPECT_FALSE(ProbeModeUses(ProbeMode::kTeCall, Probe::kKernel));
  EXPECT_TRUE(ProbeModeUses(ProbeMode::kTeCall, Probe::kPythonHook));
  EXPECT_FALSE(ProbeModeUses(ProbeMode::kKernel, Probe::kTeCall));
  EXPECT_FALSE(ProbeModeUses(ProbeMode::kKernel, Probe::kPythonHook));
  for (Probe p : kProbes) {
    EXPECT_TRUE(ProbeModeUses(ProbeMode::kAuto, p));
    EXPECT_TRUE(ProbeModeUses(ProbeMode::kAll, p));
  }
}

TEST(Vocabulary, HybridUsesE5m2ForGradientsOnly) {
  EXPECT_EQ(TypeFor(Fp8Format::kHybrid, /*backward=*/true), Fp8Type::kE5M2);
  EXPECT_EQ(TypeFor(Fp8Format::kHybrid, /*backward=*/false), Fp8Type::kE4M3);
  EXPECT_EQ(TypeFor(Fp8Format::kE4M3, /*backward=*/true), Fp8Type::kE4M3);
  EXPECT_EQ(ProbeBit(Probe::kTeCall) | ProbeBit(Probe::kKernel) | ProbeBit(Probe::kPythonHook), 7u);
}

}  // namespace
}  // namespace fp8audit
