// Generated layouts: the fixed semantics always gives one forward and one backward update per
// microbatch; te-legacy reproduces Transformer Engine's counts.
#include "state/layouts.h"

#include <gtest/gtest.h>

#include <optional>
#include <tuple>

#include "state/scenario_runner.h"

namespace fp8audit::state {
namespace {

const std::optional<CheckpointKind> kLayoutCheckpoints[] = {
    std::nullopt, CheckpointKind::kReentrant, CheckpointKind::kNonReentrant};

RunOutcome RunLayout(const LayoutSpec& spec, Semantics semantics) {
  std::string error;
  auto sc = CompileScenario(MakeLayout(spec), &error);
  EXPECT_TRUE(sc) << error;
  RunOptions o;
  o.semantics = semantics;
  return RunScenario(*sc, o);
}

std::pair<uint64_t, uint64_t> Counts(const RunOutcome& r, size_t mb = 0) {
  return {r.microbatches.at(mb).forward_updates, r.microbatches.at(mb).backward_updates};
}

TEST(FixedSemantics, EveryGeneratedLayoutUpdatesOnceForwardAndOnceBackward) {
  int layouts = 0;
  for (uint32_t layers = 1; layers <= 8; ++layers) {
    for (std::optional<CheckpointKind> mode : kLayoutCheckpoints) {
      for (auto seg : {Segments::kSingle, Segments::kPerLayer, Segments::kNested}) {
        for (bool eval : {false, true}) {
          for (uint32_t mbs = 1; mbs <= 4; ++mbs) {
            for (bool inside : {false, true}) {
              LayoutSpec spec;
              spec.layers = layers;
              spec.linears_per_layer = 1 + layers % 3;
              spec.checkpoint = mode;
              spec.segments = seg;
              spec.eval = eval;
              spec.microbatches = mbs;
              spec.backward_inside_autocast = inside;
              const RunOutcome r = RunLayout(spec, Semantics::kFixed);
              ASSERT_EQ(r.microbatches.size(), mbs);
              for (size_t m = 0; m < mbs; ++m) {
                ASSERT_EQ(Counts(r, m), std::make_pair(uint64_t{1}, uint64_t{1}))
                    << MakeLayout(spec).name() << " microbatch " << m;
              }
              ASSERT_TRUE(r.violations.empty())
                  << MakeLayout(spec).name() << ": " << r.violations[0].message();
              ASSERT_TRUE(r.passed());
              ++layouts;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(layouts, 8 * 3 * 3 * 2 * 4 * 2);
}

TEST(LayoutCheckpoint, NoneAndEachCheckpointKindsNameParseBackAndOtherWordsAreRefused) {
  for (std::optional<CheckpointKind> c : kLayoutCheckpoints) {
    // Anything but c, so that the parse has to write it.
    std::optional<CheckpointKind> parsed =
        c ? std::nullopt : std::optional(CheckpointKind::kReentrant);
    ASSERT_TRUE(ParseLayoutCheckpoint(LayoutCheckpointName(c), &parsed)) << LayoutCheckpointName(c);
    EXPECT_EQ(parsed, c);
  }
  EXPECT_EQ(LayoutCheckpointName(std::nullopt), "none");
  EXPECT_EQ(LayoutCheckpointName(CheckpointKind::kNonReentrant), "non-reentrant");
  std::optional<CheckpointKind> kept = CheckpointKind::kReentrant;
  EXPECT_FALSE(ParseLayoutCheckpoint("full", &kept));
  EXPECT_EQ(kept, CheckpointKind::kReentrant);
}

TEST(TeLegacySemantics, Decoder28x7ReentrantPerLayerGives29ForwardAnd196Backward) {
  LayoutSpec spec;
  spec.layers = 28;
  spec.linears_per_layer = 7;
  spec.checkpoint = CheckpointKind::kReentrant;
  spec.segments = Segments::kPerLayer;
  spec.microbatches = 3;
  const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(Counts(r, m), std::make_pair(uint64_t{29}, uint64_t{196})) << "microbatch " << m;
  }
  EXPECT_FALSE(r.passed());
}

struct LegacyCase {
  std::optional<CheckpointKind> mode;
  Segments segments;
  bool inside;
  uint64_t forward;
  uint64_t backward;
};

// Three Linear modules, one per layer (the seeds' minimal reproduction), hand-derived from TE's
// code at 172bd93 (quantization.py:754-782, distributed.py:264-271 and :441-446,
// linear.py:258-265).
TEST(TeLegacySemantics, ThreeLinearLayoutsMatchTransformerEngine) {
  const LegacyCase cases[] = {
      {std::nullopt, Segments::kSingle, false, 1, 1},
      {std::nullopt, Segments::kSingle, true, 1, 1},
      {CheckpointKind::kReentrant, Segments::kSingle, false, 2, 3},
      {CheckpointKind::kReentrant, Segments::kSingle, true, 1, 3},
      {CheckpointKind::kReentrant, Segments::kPerLayer, false, 4, 3},
      {CheckpointKind::kReentrant, Segments::kPerLayer, true, 1, 3},
      {CheckpointKind::kNonReentrant, Segments::kSingle, false, 2, 1},
      {CheckpointKind::kNonReentrant, Segments::kSingle, true, 1, 1},
      {CheckpointKind::kNonReentrant, Segments::kPerLayer, false, 4, 1},
      {CheckpointKind::kNonReentrant, Segments::kPerLayer, true, 1, 1},
      {CheckpointKind::kReentrant, Segments::kNested, false, 3, 2},
      {CheckpointKind::kReentrant, Segments::kNested, true, 1, 2},
  };
  for (const auto& c : cases) {
    LayoutSpec spec;
    spec.layers = 3;
    spec.checkpoint = c.mode;
    spec.segments = c.segments;
    spec.backward_inside_autocast = c.inside;
    spec.microbatches = 2;
    const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
    for (size_t m = 0; m < 2; ++m) {
      EXPECT_EQ(Counts(r, m), std::make_pair(c.forward, c.backward))
          << MakeLayout(spec).name() << " microbatch " << m;
    }
  }
}

TEST(TeLegacySemantics, ReentrantPerLayerScalesWithModulesPerSegment) {
  for (uint32_t k = 1; k <= 5; ++k) {
    LayoutSpec spec;
    spec.layers = 4;
    spec.linears_per_layer = k;
    spec.checkpoint = CheckpointKind::kReentrant;
    const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
    EXPECT_EQ(Counts(r), std::make_pair(uint64_t{5}, uint64_t{4 * k}));
  }
}

TEST(TeLegacySemantics, NestedReentrantLeaksAFirstModuleFlagAndAStashEveryMicrobatch) {
  LayoutSpec spec;
  spec.layers = 3;
  spec.checkpoint = CheckpointKind::kReentrant;
  spec.segments = Segments::kNested;
  spec.microbatches = 2;
  const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
  int leftovers = 0;
  for (const auto& v : r.violations) leftovers += v.kind() == v1::Violation::STASH_LEFT_OVER;
  EXPECT_EQ(leftovers, 4);  // per microbatch: one stale stash, one stale first-module flag
}

TEST(TeLegacySemantics, EvalModulesUnderCheckpointRaiseOnRecompute) {
  LayoutSpec spec;
  spec.layers = 2;
  spec.checkpoint = CheckpointKind::kReentrant;
  spec.segments = Segments::kSingle;
  spec.eval = true;
  const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
  EXPECT_TRUE(r.microbatches[0].aborted);
  ASSERT_FALSE(r.violations.empty());
  EXPECT_EQ(r.violations[0].kind(), v1::Violation::STASH_MISSING);
}

TEST(Explanations, EachExtraUpdateNamesTheTransitionThatCausedIt) {
  LayoutSpec spec;
  spec.layers = 2;
  spec.checkpoint = CheckpointKind::kReentrant;
  const RunOutcome r = RunLayout(spec, Semantics::kTeLegacy);
  ASSERT_EQ(Counts(r), std::make_pair(uint64_t{3}, uint64_t{2}));
  const auto& ex = r.microbatches[0].explanations;
  ASSERT_EQ(ex.size(), 3u);  // two extra forward updates, one extra backward update
  EXPECT_NE(ex[0].find("recompute of checkpoint frame 2 (reentrant), autocast exit"),
            std::string::npos)
      << ex[0];
  EXPECT_NE(ex[1].find("recompute of checkpoint frame 1 (reentrant), autocast exit"),
            std::string::npos)
      << ex[1];
  EXPECT_NE(ex[2].find("backward of module 'layer0.linear0'"), std::string::npos) << ex[2];
  EXPECT_NE(ex[2].find("re-armed the flag at depth 0"), std::string::npos) << ex[2];
}

TEST(Explanations, NoneWhenCountsMatch) {
  LayoutSpec spec;
  spec.layers = 3;
  spec.checkpoint = CheckpointKind::kReentrant;
  const RunOutcome r = RunLayout(spec, Semantics::kFixed);
  EXPECT_TRUE(r.microbatches[0].explanations.empty());
}

}  // namespace
}  // namespace fp8audit::state
