// The linked runtime on the CPU backend: ownership counts, numerics with and without
// checkpointing, the edge cases of the fixed rules, and bad input.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/reference.h"
#include "runtime/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/modules.h"
#include "runtime/repro/repro.h"
#include "runtime/state_manager.h"
#include "state/layouts.h"
#include "state/scenario.h"
#include "state/scenario_runner.h"

namespace fp8audit::runtime {
namespace {

using repro::Layout;
using repro::ReproOptions;
using repro::ReproResult;

StateManager& Mgr() { return StateManager::Get(); }

void Reset(state::Semantics semantics = state::Semantics::kFixed) {
  RuntimeOptions o;
  o.semantics = semantics;
  Mgr().Configure(o);
  Mgr().TakeViolations();
}

ReproOptions Opts(Layout layout, uint32_t decoder_layers = 0) {
  ReproOptions o;
  o.layout = layout;
  o.decoder_layers = decoder_layers;
  o.hidden = decoder_layers ? 16 : 32;
  o.tokens = 16;
  o.microbatches = 4;
  o.accumulation = 2;
  o.nvtx = false;
  return o;
}

std::string Describe(const ReproResult& r) {
  std::string s;
  for (size_t i = 0; i < r.forward_updates.size(); ++i) {
    s += std::to_string(r.forward_updates[i]) + "/" + std::to_string(r.backward_updates[i]) + " ";
  }
  if (!r.error.empty()) s += "error: " + r.error;
  for (const auto& v : r.violations) s += " | " + v;
  return s;
}

void ExpectOnesAndHealthy(const ReproResult& r) {
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(r.ones_everywhere()) << Describe(r);
  EXPECT_TRUE(r.finite);
  EXPECT_TRUE(r.nonzero);
  EXPECT_TRUE(r.violations.empty()) << Describe(r);
  EXPECT_EQ(r.stash_left, 0u);
}

void ExpectBitwiseEqual(const ReproResult& a, const ReproResult& b) {
  std::string what;
  EXPECT_TRUE(repro::BitwiseEqual(a, b, &what)) << "first difference: " << what;
}

class EveryLayout : public ::testing::TestWithParam<std::tuple<Layout, uint32_t>> {};

std::string LayoutTestName(const ::testing::TestParamInfo<std::tuple<Layout, uint32_t>>& info) {
  std::string name(repro::LayoutName(std::get<0>(info.param)));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  const uint32_t layers = std::get<1>(info.param);
  return name + (layers ? "_decoder" + std::to_string(layers) + "x7" : "_three_linear");
}

TEST_P(EveryLayout, FixedOwnershipUpdatesOnceForwardAndOnceBackwardPerMicrobatch) {
  const auto [layout, layers] = GetParam();
  ExpectOnesAndHealthy(repro::Run(Opts(layout, layers)));
}

TEST_P(EveryLayout, FixedOwnershipCheckpointedRunIsBitwiseIdenticalToNoCheckpoint) {
  const auto [layout, layers] = GetParam();
  for (uint64_t seed : {0u, 1u, 2u}) {
    for (Fp8Format format : {Fp8Format::kHybrid, Fp8Format::kE4M3}) {
      ReproOptions o = Opts(layout, layers);
      o.seed = seed;
      o.recipe.format = format;
      ReproOptions ref = o;
      ref.layout = Layout::kNone;
      const ReproResult a = repro::Run(ref);
      const ReproResult b = repro::Run(o);
      ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
      ExpectBitwiseEqual(a, b);
    }
  }
}

TEST_P(EveryLayout, TeLegacyCountsEqualTheOwnershipModelsPrediction) {
  const auto [layout, layers] = GetParam();
  ReproOptions o = Opts(layout, layers);
  o.semantics = state::Semantics::kTeLegacy;
  o.microbatches = 3;
  const ReproResult r = repro::Run(o);
  ASSERT_TRUE(r.error.empty()) << r.error;

  state::LayoutSpec spec;
  spec.layers = layers ? layers : 3;
  spec.linears_per_layer = layers ? 7 : 1;
  spec.microbatches = o.microbatches;
  switch (layout) {
    case Layout::kNone:
      spec.checkpoint = std::nullopt;
      break;
    case Layout::kReentrantSingle:
    case Layout::kReentrantPerLayer:
    case Layout::kNested:
      spec.checkpoint = CheckpointKind::kReentrant;
      break;
    default:
      spec.checkpoint = CheckpointKind::kNonReentrant;
  }
  spec.segments = layout == Layout::kNested ? state::Segments::kNested
                  : (layout == Layout::kReentrantSingle || layout == Layout::kNonReentrantSingle)
                      ? state::Segments::kSingle
                      : state::Segments::kPerLayer;
  std::string error;
  const auto compiled = state::CompileScenario(state::MakeLayout(spec), &error);
  ASSERT_TRUE(compiled) << error;
  state::RunOptions ro;
  ro.semantics = state::Semantics::kTeLegacy;
  const state::RunOutcome predicted = state::RunScenario(*compiled, ro);
  ASSERT_EQ(predicted.microbatches.size(), r.forward_updates.size());
  for (size_t i = 0; i < r.forward_updates.size(); ++i) {
    EXPECT_EQ(r.forward_updates[i], predicted.microbatches[i].forward_updates)
        << "microbatch " << i;
    EXPECT_EQ(r.backward_updates[i], predicted.microbatches[i].backward_updates)
        << "microbatch " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runtime, EveryLayout,
    ::testing::Combine(::testing::Values(Layout::kNone, Layout::kReentrantSingle,
                                         Layout::kReentrantPerLayer, Layout::kNonReentrantSingle,
                                         Layout::kNonReentrantPerLayer, Layout::kNested),
                       ::testing::Values(0u, 2u)),
    LayoutTestName);

// ---- the fixed rules' edge cases -----------------------------------------------------------

class CheckpointLayout : public ::testing::TestWithParam<Layout> {};

std::string CheckpointLayoutName(const ::testing::TestParamInfo<Layout>& info) {
  std::string name(repro::LayoutName(info.param));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

TEST_P(CheckpointLayout, EvalModulesStashWhateverTheirModeAndMatchNoCheckpoint) {
  ReproOptions o = Opts(GetParam());
  o.eval_modules = true;
  ReproOptions ref = o;
  ref.layout = Layout::kNone;
  const ReproResult r = repro::Run(o);
  ExpectOnesAndHealthy(r);
  ExpectBitwiseEqual(repro::Run(ref), r);
}

TEST_P(CheckpointLayout, TrainEvalSwitchBetweenForwardAndRecomputeKeepsOneOne) {
  for (bool eval : {false, true}) {
    ReproOptions o = Opts(GetParam());
    o.eval_modules = eval;
    o.switch_mode = true;
    ReproOptions ref = o;
    ref.layout = Layout::kNone;
    const ReproResult r = repro::Run(o);
    ExpectOnesAndHealthy(r);
    ExpectBitwiseEqual(repro::Run(ref), r);
  }
}

TEST_P(CheckpointLayout, NoGradForwardRunsCheckpointsDirectlyAndLeavesNoStash) {
  ReproOptions o = Opts(GetParam());
  o.no_grad_forward = true;
  const ReproResult r = repro::Run(o);
  ExpectOnesAndHealthy(r);
  ReproOptions ref = o;
  ref.layout = Layout::kNone;
  ExpectBitwiseEqual(repro::Run(ref), r);
}

INSTANTIATE_TEST_SUITE_P(Runtime, CheckpointLayout,
                         ::testing::Values(Layout::kReentrantSingle, Layout::kReentrantPerLayer,
                                           Layout::kNonReentrantSingle,
                                           Layout::kNonReentrantPerLayer, Layout::kNested),
                         CheckpointLayoutName);

// Long enough to have diverged (loss NOT FINITE) with the unnormalised loss and unclipped SGD:
// the decoder-like stack at H=16 within 22 microbatches, at H=64 within 16, in FP32 as in FP8;
// 28 layers within 20.
TEST(Repro, TrainingStaysFiniteAndLearnsOverLongRuns) {
  struct Case {
    uint32_t layers;
    int64_t hidden, tokens;
    uint32_t microbatches, seeds;
    state::Semantics semantics;
  };
  for (const Case& c : {Case{2, 16, 8, 40, 3, state::Semantics::kFixed},
                        Case{2, 64, 32, 16, 3, state::Semantics::kFixed},
                        Case{2, 16, 8, 40, 1, state::Semantics::kTeLegacy},
                        Case{28, 16, 8, 24, 1, state::Semantics::kFixed}}) {
    for (uint32_t seed = 0; seed < c.seeds; ++seed) {
      ReproOptions o = Opts(Layout::kNone, c.layers);
      o.semantics = c.semantics;
      o.layout =
          c.semantics == state::Semantics::kFixed ? Layout::kNone : Layout::kReentrantPerLayer;
      o.hidden = c.hidden;
      o.tokens = c.tokens;
      o.microbatches = c.microbatches;
      o.seed = seed;
      const ReproResult r = repro::Run(o);
      const std::string what = std::to_string(c.layers) + "x7 H=" + std::to_string(c.hidden) +
                               " seed " + std::to_string(seed);
      ASSERT_TRUE(r.error.empty()) << what << ": " << r.error;
      ASSERT_EQ(r.losses.size(), c.microbatches) << what;
      const auto bad = std::find_if(r.losses.begin(), r.losses.end(),
                                    [](float loss) { return !std::isfinite(loss); });
      EXPECT_EQ(bad, r.losses.end())
          << what << ": loss not finite from microbatch " << (bad - r.losses.begin());
      EXPECT_TRUE(r.finite) << what;
      // It trains: the last quarter's mean loss is below the first quarter's.
      const size_t q = r.losses.size() / 4;
      double first = 0, last = 0;
      for (size_t i = 0; i < q; ++i) {
        first += r.losses[i];
        last += r.losses[r.losses.size() - 1 - i];
      }
      EXPECT_LT(last, first) << what;
    }
  }
}

TEST(FixedOwnership, AutocastOpenedInsideTheCheckpointedCallableKeepsOneOneAndNumerics) {
  for (Layout layout : {Layout::kReentrantSingle, Layout::kNonReentrantSingle, Layout::kNested}) {
    ReproOptions o = Opts(layout);
    o.inner_autocast = true;
    ReproOptions ref = o;
    ref.layout = Layout::kNone;
    const ReproResult r = repro::Run(o);
    ExpectOnesAndHealthy(r);
    ExpectBitwiseEqual(repro::Run(ref), r);
  }
}

TEST(TeLegacyOwnership, EvalModuleUnderReentrantCheckpointRaisesLikeTransformerEngine) {
  ReproOptions o = Opts(Layout::kReentrantSingle);
  o.semantics = state::Semantics::kTeLegacy;
  o.eval_modules = true;
  const ReproResult r = repro::Run(o);
  EXPECT_NE(r.error.find("recomputes with no stashed FP8 metadata"), std::string::npos) << r.error;
}

TEST(FixedOwnership, NoGradCheckpointOfEitherKindLeavesNoStashAndNoOpenFrame) {
  Reset();
  Linear fc(8, 8);
  const at::Tensor x = at::randn({4, 8});
  for (CheckpointKind kind : {CheckpointKind::kReentrant, CheckpointKind::kNonReentrant}) {
    MicrobatchScope mb;
    at::NoGradGuard no_grad;
    Fp8Autocast autocast;
    const at::Tensor y = checkpoint([&](const at::Tensor& t) { return fc->forward(t); }, x, kind);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(Mgr().stash_entries(), 0u);
  }
  EXPECT_EQ(Mgr().open_scopes(), 0u);
  EXPECT_EQ(Mgr().forward_updates(), 0u);  // no grad: no forward update
  EXPECT_TRUE(Mgr().TakeViolations().empty());
}

// ---- exceptions ------------------------------------------------------------------------------

struct ThreeLinear {
  Linear fc1{16, 16}, fc2{16, 16}, fc3{16, 16};
  at::Tensor operator()(const at::Tensor& x) { return fc3->forward(fc2->forward(fc1->forward(x))); }
};

// One microbatch: forward under autocast (through `forward`), backward; returns (fwd, bwd).
std::pair<uint64_t, uint64_t> Microbatch(const std::function<at::Tensor(const at::Tensor&)>& fwd,
                                         const at::Tensor& x) {
  const uint64_t f0 = Mgr().forward_updates();
  const uint64_t b0 = Mgr().backward_updates();
  MicrobatchScope mb;
  at::Tensor y;
  {
    Fp8Autocast autocast;
    y = fwd(x);
  }
  y.pow(2).sum().backward();
  return {Mgr().forward_updates() - f0, Mgr().backward_updates() - b0};
}

class BothKinds : public ::testing::TestWithParam<CheckpointKind> {};

TEST_P(BothKinds, ExceptionInTheCheckpointedForwardLeavesTheStateUsable) {
  Reset();
  torch::manual_seed(0);
  ThreeLinear net;
  const at::Tensor x = at::randn({8, 16}).requires_grad_();
  {
    MicrobatchScope mb;
    EXPECT_THROW(
        {
          Fp8Autocast autocast;
          checkpoint(
              [&](const at::Tensor& t) -> at::Tensor {
                (void)net.fc1->forward(t);
                throw std::runtime_error("boom in forward");
              },
              x, GetParam());
        },
        std::runtime_error);
    EXPECT_EQ(Mgr().open_scopes(), 0u);
  }
  EXPECT_EQ(Mgr().stash_entries(), 0u);
  Mgr().TakeViolations();
  for (int i = 0; i < 2; ++i) {
    const auto counts = Microbatch(
        [&](const at::Tensor& t) { return checkpoint(std::ref(net), t, GetParam()); }, x);
    EXPECT_EQ(counts, std::make_pair(uint64_t{1}, uint64_t{1}));
  }
  EXPECT_TRUE(Mgr().TakeViolations().empty());
}

TEST_P(BothKinds, ExceptionInTheRecomputeRollsBackAndARetryMatchesACleanRun) {
  // Reference: the same microbatch without any failure.
  auto run = [&](bool fail_once) {
    Reset();
    torch::manual_seed(0);
    ThreeLinear net;
    const at::Tensor x = at::randn({8, 16}).requires_grad_();
    int calls = 0;
    const uint64_t f0 = Mgr().forward_updates();
    const uint64_t b0 = Mgr().backward_updates();
    {
      MicrobatchScope mb;
      at::Tensor y;
      {
        Fp8Autocast autocast;
        y = checkpoint(
            [&](const at::Tensor& t) {
              if (++calls == 2 && fail_once) throw std::runtime_error("boom in recompute");
              return net(t);
            },
            x, GetParam());
      }
      const at::Tensor loss = y.pow(2).sum();
      if (fail_once) {
        EXPECT_ANY_THROW(loss.backward({}, /*retain_graph=*/true));
        EXPECT_EQ(Mgr().open_scopes(), 0u);
        EXPECT_EQ(Mgr().stash_entries(), 3u);  // rolled back: the frame can recompute again
      }
      loss.backward();
    }
    EXPECT_EQ(Mgr().forward_updates() - f0, 1u);
    EXPECT_EQ(Mgr().backward_updates() - b0, 1u);
    EXPECT_EQ(Mgr().stash_entries(), 0u);
    EXPECT_TRUE(Mgr().TakeViolations().empty());
    return std::make_tuple(x.grad().clone(), net.fc1->weight.grad().clone(),
                           net.fc3->weight.grad().clone());
  };
  const auto clean = run(false);
  const auto retried = run(true);
  EXPECT_TRUE(at::equal(std::get<0>(clean), std::get<0>(retried)));
  EXPECT_TRUE(at::equal(std::get<1>(clean), std::get<1>(retried)));
  EXPECT_TRUE(at::equal(std::get<2>(clean), std::get<2>(retried)));
}

INSTANTIATE_TEST_SUITE_P(
    Runtime, BothKinds,
    ::testing::Values(CheckpointKind::kReentrant, CheckpointKind::kNonReentrant),
    [](const ::testing::TestParamInfo<CheckpointKind>& info) {
      return std::string(info.param == CheckpointKind::kReentrant ? "reentrant" : "non_reentrant");
    });

// ---- numerics of the CPU backend -------------------------------------------------------------

TEST(CpuBackend, LinearForwardIsTheFp8EmulationOfItsInputsAndTheUpdateSetsTheScale) {
  Reset();
  torch::manual_seed(3);
  Linear fc(32, 16);
  const at::Tensor x = at::randn({8, 32});
  at::Tensor y;
  {
    MicrobatchScope mb;
    Fp8Autocast autocast;
    y = fc->forward(x);
  }
  // Reference: quantize with scale 1 (the initial scale), dequantize, float GEMM.
  auto qdq = [](const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    std::vector<uint8_t> q(c.numel());
    float amax = 0, sinv = 0;
    kernels::ref::quantize(c.data_ptr<float>(), kernels::DType::kFloat32, q.size(), 1.0f,
                           Fp8Type::kE4M3, q.data(), &amax, &sinv);
    at::Tensor out = at::empty_like(c);
    kernels::ref::dequantize(q.data(), q.size(), sinv, Fp8Type::kE4M3, kernels::DType::kFloat32,
                             out.data_ptr<float>());
    return out;
  };
  const at::Tensor expected = at::mm(qdq(x), qdq(fc->weight.detach()).t()) + fc->bias.detach();
  EXPECT_TRUE(at::equal(y.detach(), expected));
  // The forward update at the autocast exit: scale = 448 / amax (margin 0).
  const float amax = x.abs().max().item<float>();
  EXPECT_EQ(Mgr().forward_scale(fc->module_id(), 0), 448.0f / amax);
}

TEST(CpuBackend, Fp8GradientsAreCloseToHighPrecisionOnes) {
  Reset();
  torch::manual_seed(4);
  LayerNormMLP mlp(32, 64);
  const at::Tensor x = at::randn({16, 32}).requires_grad_();
  // Warm the scales up with two microbatches, then compare against the same module without FP8.
  for (int i = 0; i < 2; ++i) Microbatch([&](const at::Tensor& t) { return mlp->forward(t); }, x);
  x.mutable_grad() = at::Tensor();
  mlp->zero_grad();
  Microbatch([&](const at::Tensor& t) { return mlp->forward(t); }, x);
  const at::Tensor fp8_grad = x.grad().clone();
  x.mutable_grad() = at::Tensor();
  {
    MicrobatchScope mb;
    mlp->forward(x).pow(2).sum().backward();  // no autocast: high precision
  }
  const double rel = (fp8_grad - x.grad()).norm().item<double>() / x.grad().norm().item<double>();
  EXPECT_LT(rel, 0.15);
  EXPECT_GT(rel, 0.0);
}

TEST(Backends, CudaBackendFailsClearlyWhenNotBuilt) {
  if (backend::cuda_built()) GTEST_SKIP() << "this build has the CUDA backend";
  try {
    backend::cuda::DelayedScalingUpdate(at::Tensor(), at::Tensor(), at::Tensor(), Fp8Type::kE4M3, 0,
                                        kernels::AmaxAlgo::kMax);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA backend not built"), std::string::npos);
  }
}

// ---- bad input -------------------------------------------------------------------------------

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void ExpectStateStillWorks() {
  EXPECT_EQ(Mgr().open_scopes(), 0u);
  EXPECT_EQ(Mgr().autocast_depth(), 0u);
  torch::manual_seed(0);
  ThreeLinear net;
  const at::Tensor x = at::randn({4, 16}).requires_grad_();
  EXPECT_EQ(Microbatch(
                [&](const at::Tensor& t) {
                  return checkpoint(std::ref(net), t, CheckpointKind::kReentrant);
                },
                x),
            std::make_pair(uint64_t{1}, uint64_t{1}));
  EXPECT_TRUE(Mgr().TakeViolations().empty());
}

TEST(BadInput, RecipeValuesOutOfRangeNameTheArgumentAndOpenNothing) {
  Reset();
  DelayedScaling r;
  r.margin = 200;
  EXPECT_NE(ErrorOf([&] { Fp8Autocast a(true, r); }).find("'margin'"), std::string::npos);
  r = DelayedScaling();
  r.amax_history_len = 0;
  EXPECT_NE(ErrorOf([&] { Fp8Autocast a(true, r); }).find("'amax_history_len'"), std::string::npos);
  r = DelayedScaling();
  r.format = static_cast<Fp8Format>(7);
  EXPECT_NE(ErrorOf([&] { Fp8Autocast a(true, r); }).find("'format'"), std::string::npos);
  r = DelayedScaling();
  r.amax_compute_algo = static_cast<kernels::AmaxAlgo>(9);
  EXPECT_NE(ErrorOf([&] { Fp8Autocast a(true, r); }).find("'amax_compute_algo'"),
            std::string::npos);
  ExpectStateStillWorks();
}

TEST(BadInput, MismatchedShapesAndUnsupportedDtypesNameTheArgument) {
  Reset();
  Linear fc(16, 8);
  LayerNormMLP mlp(16, 32);
  {
    MicrobatchScope mb;
    Fp8Autocast autocast;
    EXPECT_NE(ErrorOf([&] { fc->forward(at::randn({4, 15})); }).find("'input'"), std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                mlp->forward(at::randn({4, 17}));
              }).find("'input'"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                fc->forward(at::ones({4, 16}, at::kInt));
              }).find("unsupported dtype"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                fc->forward(at::randn({4, 16}, at::kDouble));
              }).find("'input'"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] { fc->forward(at::Tensor()); }).find("'input'"), std::string::npos);
  }
  ModuleOptions o;
  o.dtype = at::kInt;
  EXPECT_NE(ErrorOf([&] { Linear bad(4, 4, o); }).find("'dtype'"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Linear bad(0, 4); }).find("'in_features'"), std::string::npos);
  EXPECT_TRUE(Mgr().TakeViolations().empty());
  ExpectStateStillWorks();
}

TEST(BadInput, CheckpointOfANonCallableOrOfInputsThatNeedNoGradNamesTheArgument) {
  Reset();
  const at::Tensor x = at::randn({4, 16});
  {
    MicrobatchScope mb;
    Fp8Autocast autocast;
    EXPECT_NE(ErrorOf([&] {
                checkpoint(CheckpointFunction1(), x, CheckpointKind::kReentrant);
              }).find("'fn'"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                checkpoint(CheckpointFunction(), std::vector<at::Tensor>{x},
                           CheckpointKind::kNonReentrant);
              }).find("'fn'"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                checkpoint([](const at::Tensor& t) { return t * 2; }, x,
                           CheckpointKind::kReentrant);
              }).find("'inputs'"),
              std::string::npos);
    EXPECT_NE(ErrorOf([&] {
                checkpoint([](const std::vector<at::Tensor>& t) { return t; },
                           std::vector<at::Tensor>{at::Tensor()}, CheckpointKind::kNonReentrant);
              }).find("'inputs[0]'"),
              std::string::npos);
    EXPECT_EQ(Mgr().stash_entries(), 0u);
  }
  EXPECT_TRUE(Mgr().TakeViolations().empty());
  ExpectStateStillWorks();
}

TEST(BadInput, ConfigureWhileAnAutocastIsOpenIsRefused) {
  Reset();
  Fp8Autocast autocast;
  EXPECT_THROW(Mgr().Configure(RuntimeOptions()), std::logic_error);
}

TEST(BadInput, ConfigureWithASemanticsOnlyTheModelHasIsRefusedNamingWhatTheRuntimeImplements) {
  Reset();
  RuntimeOptions o;
  o.semantics = state::Semantics::kTe220;
  try {
    Mgr().Configure(o);
    ADD_FAILURE() << "te-2.20 accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'te-2.20'"), std::string::npos) << what;
    EXPECT_NE(what.find("fixed, te-172bd93"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(Mgr().semantics(), state::Semantics::kFixed);  // the manager kept its options
}

TEST(RuntimeSemantics, NamesAndAliasesOfFixedAndTe172bd93ParseOthersAreRefusedInOneLine) {
  EXPECT_EQ(ParseRuntimeSemantics("fixed"), state::Semantics::kFixed);
  EXPECT_EQ(ParseRuntimeSemantics("te-172bd93"), state::Semantics::kTeLegacy);
  EXPECT_EQ(ParseRuntimeSemantics("te-legacy"), state::Semantics::kTeLegacy);
  EXPECT_EQ(ParseRuntimeSemantics("te-2.19"), state::Semantics::kTeLegacy);
  std::string error;
  EXPECT_FALSE(ParseRuntimeSemantics("te-2.20", &error));
  EXPECT_EQ(error, "semantics 'te-2.20' is the model's only; the runtime implements " +
                       RuntimeSemanticsNames());
  EXPECT_FALSE(ParseRuntimeSemantics("bogus", &error));
  EXPECT_EQ(error.rfind("unknown semantics 'bogus'; the runtime implements ", 0), 0u) << error;
  EXPECT_EQ(RuntimeSemanticsNames(), "fixed, te-172bd93 (aliases te-2.19, te-legacy)");
}

TEST(Bookkeeping, MeasuredTimeIsReportedAndSmall) {
  ReproOptions o = Opts(Layout::kReentrantPerLayer, 2);
  o.measure = true;
  const ReproResult r = repro::Run(o);
  ExpectOnesAndHealthy(r);
  EXPECT_GT(r.bookkeeping_ns, 0u);
  EXPECT_GT(r.bookkeeping_calls, 0u);
  EXPECT_LT(static_cast<double>(r.bookkeeping_ns) * 1e-9, r.seconds);
}

// runtime_bench's method: warm-up microbatches train the same model first and are left out of the
// timed window, which counts exactly the transitions of the timed microbatches.
TEST(Bookkeeping, WarmupMicrobatchesAreLeftOutOfTheTimedWindow) {
  ReproOptions o = Opts(Layout::kReentrantPerLayer, 2);
  o.measure = true;
  o.accumulation = 2;
  o.microbatches = 2;
  const ReproResult plain = repro::Run(o);
  ExpectOnesAndHealthy(plain);
  o.warmup = 2;
  o.checks = false;
  const ReproResult timed = repro::Run(o);
  EXPECT_TRUE(timed.error.empty()) << timed.error;
  EXPECT_TRUE(timed.ones_everywhere()) << Describe(timed);
  EXPECT_EQ(timed.forward_updates.size(), 4u);  // warm-up and timed microbatches all ran
  EXPECT_TRUE(timed.violations.empty()) << Describe(timed);
  EXPECT_EQ(timed.stash_left, 0u);
  EXPECT_TRUE(timed.outputs.empty() && timed.step_grads.empty() && timed.final_params.empty());
  EXPECT_EQ(timed.bookkeeping_calls, plain.bookkeeping_calls);
  EXPECT_GT(timed.bookkeeping_ns, 0u);
  EXPECT_GT(timed.seconds, 0.0);
}

}  // namespace
}  // namespace fp8audit::runtime
