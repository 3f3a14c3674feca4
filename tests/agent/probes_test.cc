// Every probe on the CPU, driven with made-up callback data through a sink that keeps its events
// (the seam of record_sink.h): the kernel probe with CUPTI callback structs and a fake driver
// table (classified launches, chunked bulk updates, graph launches, stream capture, module unload,
// cross-checks inside TE calls), the te-call probe with fake calls (directions, tensor counts,
// unknown dtypes), the python-hook probe (ranges, marks, deferring to inner probes), the pass
// boundaries, the conversion of the new event kinds and the probe-choice rules.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/hook_probe.h"
#include "agent/src/kernel_probe.h"
#include "agent/src/pass_tracker.h"
#include "agent/src/probe_control.h"
#include "agent/src/te_probe.h"
#include "agent/src/thread_state.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

// Keeps what the probes record; "threads" are ThreadStates the test switches between.
class TestSink : public RecordSink {
 public:
  ThreadState* Thread(uint32_t tid, bool autograd = false) {
    auto ts = std::make_unique<ThreadState>();
    ts->tid = tid;
    if (autograd) ts->role = Role::kAutograd;
    threads_.push_back(std::move(ts));
    return threads_.back().get();
  }
  void Use(ThreadState* ts) { current_ = ts; }

  ThreadState* Self() override { return current_; }
  void Record(ThreadState* ts, RawEvent* e) override {
    e->tid = ts->tid;
    e->pass = pass_.PassOf(ts);
    e->ts_ns = ++clock_;
    e->launches = launches;
    events.push_back(*e);
  }
  void OnActivity(ThreadState* ts, const char* what) override {
    RawEvent boundary;
    if (pass_.OnActivity(ts, what, &boundary)) Record(ts, &boundary);
  }
  void CountLaunches(uint64_t n) override { launches += n; }
  void EnsureTrace() override { ++traces_ensured; }

  // The converted events (as the writer converts them), kinds only or whole.
  std::vector<v1::Event> Converted(FormatHint hint = FormatHint::kAuto) const {
    EventConverter c(hint);
    std::vector<v1::Event> out;
    for (const RawEvent& e : events) c.Push(e, &out);
    c.Flush(&out);
    return out;
  }
  std::vector<v1::EventKind> Kinds(FormatHint hint = FormatHint::kAuto) const {
    std::vector<v1::EventKind> kinds;
    for (const auto& e : Converted(hint)) kinds.push_back(e.kind());
    return kinds;
  }

  std::vector<RawEvent> events;
  uint64_t launches = 0;
  int traces_ensured = 0;

 private:
  std::vector<std::unique_ptr<ThreadState>> threads_;
  ThreadState* current_ = nullptr;
  PassTracker pass_;
  uint64_t clock_ = 0;
};

using K = std::vector<v1::EventKind>;

// ---- te-call probe --------------------------------------------------------------------------

TEST(TeCallProbe, EachCallIsOneUpdateWithItsEntryTensorsAndDtype) {
  TestSink sink;
  int first = 0;
  TeCallProbe probe(&sink, [&] { ++first; });
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  ASSERT_TRUE(probe.Begin(1, 7, 12));
  EXPECT_EQ(main->ledger.te_call_depth, 1u);
  probe.End();
  EXPECT_EQ(main->ledger.te_call_depth, 0u);
  ASSERT_TRUE(probe.Begin(0, 8, 1));
  probe.End();
  EXPECT_FALSE(probe.Begin(2, 7, 1));  // not an entry point: nothing recorded
  EXPECT_EQ(first, 1);
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind, RawKind::kTeCall);
  EXPECT_EQ(sink.events[0].Tensors(), 12u);
  EXPECT_EQ(sink.events[0].scaled_max, ScaledMax::kE4M3);
  EXPECT_EQ(sink.events[0].fn->name,
            "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction");
  EXPECT_EQ(sink.events[1].scaled_max, ScaledMax::kE5M2);
  EXPECT_EQ(sink.events[1].fn->name, "nvte_delayed_scaling_recipe_amax_and_scale_update");
  EXPECT_EQ(main->ledger.counted_updates, 2u);
  const auto converted = sink.Converted();
  ASSERT_EQ(converted.size(), 2u);
  EXPECT_EQ(converted[0].kind(), v1::UPDATE_FORWARD);
  EXPECT_EQ(converted[0].source(), v1::TE_CALL);
  EXPECT_EQ(converted[0].tensors(), 12u);
  EXPECT_EQ(converted[1].kind(), v1::UPDATE_BACKWARD);  // E5M2: only gradients use it
}

TEST(TeCallProbe, DirectionsFollowTheDtypeThenThePassAndPassBoundariesAreRecorded) {
  TestSink sink;
  TeCallProbe probe(&sink);
  ThreadState* main = sink.Thread(1);
  ThreadState* autograd = sink.Thread(2, /*autograd=*/true);
  auto call = [&](ThreadState* ts, int dtype) {
    sink.Use(ts);
    ASSERT_TRUE(probe.Begin(1, dtype, 3));
    probe.End();
  };
  call(main, 7);      // forward update
  call(autograd, 7);  // E4M3 on an autograd thread: a recompute (HYBRID) or backward (E4M3)
  call(autograd, 4);  // an unknown dtype: the pass
  call(main, 7);
  // Auto format: no E5M2 was ever seen, so the held E4M3 update goes by its pass (E4M3-only).
  EXPECT_EQ(sink.Kinds(), (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_BACKWARD,
                             v1::UPDATE_BACKWARD, v1::BACKWARD_END, v1::UPDATE_FORWARD}));
  EXPECT_EQ(sink.Kinds(FormatHint::kHybrid),
            (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD,
               v1::BACKWARD_END, v1::UPDATE_FORWARD}));
  const auto converted = sink.Converted();
  EXPECT_EQ(converted[1].detail(), "TE update call on an autograd thread");
}

TEST(TeCallProbe, AThrownCallLeavesTheThreadInACallUntilItsNextCall) {
  TestSink sink;
  TeCallProbe probe(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  ASSERT_TRUE(probe.Begin(1, 7, 1));  // never reaches End
  EXPECT_EQ(main->ledger.te_call_depth, 1u);
  ASSERT_TRUE(probe.Begin(1, 7, 1));
  probe.End();
  EXPECT_EQ(main->ledger.te_call_depth, 0u);
}

// ---- python-hook probe ----------------------------------------------------------------------

TEST(HookProbe, ParsesItsUpdateRanges) {
  HookUpdate u;
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update pass=backward count=3 unfused=1", &u));
  EXPECT_EQ(u.rule, RuleEvent::kUpdateBackward);
  EXPECT_EQ(u.count, 3u);
  EXPECT_EQ(u.unfused, 1u);
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update", &u));
  EXPECT_EQ(u.rule, RuleEvent::kUpdate);
  EXPECT_EQ(u.count, 1u);
  ASSERT_TRUE(ParseHookUpdate("fp8audit.te.update pass=forward count=2 unfused=9", &u));
  EXPECT_EQ(u.unfused, 2u);  // at most count
  EXPECT_FALSE(ParseHookUpdate("fp8audit.te.updates", &u));
  EXPECT_FALSE(ParseHookUpdate("fp8audit.te.update count=x", &u));
  EXPECT_FALSE(ParseHookUpdate("update.forward", &u));
  EXPECT_TRUE(IsHookMark("fp8audit.te te=2.20.2"));
  EXPECT_TRUE(IsHookMark("fp8audit.patch te=2.20.2 semantics=fixed"));
  EXPECT_FALSE(IsHookMark("fp8audit.step"));
}

TEST(HookProbe, AnUpdateRangeCountsWhenNothingInsideItDid) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  // The unfused path: no TE call inside the range.
  ASSERT_TRUE(hook.OnPush(main, nullptr, 0, "fp8audit.te.update pass=forward count=2 unfused=2"));
  hook.OnPop(main, nullptr, 0);
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::UPDATE_FORWARD);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].count(), 2u);
  EXPECT_EQ(main->ledger.counted_updates, 2u);
}

TEST(HookProbe, AnUpdateRangeAroundTeCallsIsACrossCheckForItsFusedUpdates) {
  TestSink sink;
  HookProbe hook(&sink);
  TeCallProbe te(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  ASSERT_TRUE(hook.OnPush(autograd, nullptr, 3,
                          "fp8audit.te.update pass=backward count=3 "
                          "unfused=1"));
  hook.OnPop(autograd, nullptr, 2);  // another range's pop: not the hook's
  ASSERT_TRUE(te.Begin(1, 8, 4));
  te.End();
  ASSERT_TRUE(te.Begin(1, 8, 4));
  te.End();
  hook.OnPop(autograd, nullptr, 3);
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].kind(), v1::BACKWARD_BEGIN);
  EXPECT_EQ(e[1].source(), v1::TE_CALL);
  EXPECT_EQ(e[2].source(), v1::TE_CALL);
  EXPECT_EQ(e[3].kind(), v1::UPDATE_BACKWARD);  // the unfused one counts
  EXPECT_EQ(e[3].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[3].count(), 1u);
  EXPECT_EQ(e[4].kind(), v1::CROSSCHECK_UPDATE_BACKWARD);  // the fused ones: the TE calls counted
  EXPECT_EQ(e[4].count(), 2u);
  EXPECT_EQ(autograd->hook.nranges, 0);
}

TEST(HookProbe, MarksRecordTheTeVersionAndThePatch) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.20.2+cu13"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.patch te=2.20.2 semantics=fixed"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.step"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.20\xff<x>"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].kind(), v1::TE_VERSION);
  EXPECT_EQ(e[0].te_version(), "2.20.2+cu13");
  EXPECT_EQ(e[0].pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(e[1].kind(), v1::TE_PATCHED);
  EXPECT_EQ(e[1].te_version(), "2.20.2");
  EXPECT_EQ(e[1].semantics(), "fixed");
  EXPECT_EQ(e[2].te_version(), "2.20??x?");  // a version's characters only
  EXPECT_EQ(e[0].semantics(), "");           // none TE's code showed
}

TEST(HookProbe, ATeVersionMarkKeepsTheSemanticsTesCodeShows) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te te=2.21.0.dev0 semantics=te-3456"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::TE_VERSION);
  EXPECT_EQ(e[0].te_version(), "2.21.0.dev0");
  EXPECT_EQ(e[0].semantics(), "te-3456");
}

TEST(HookProbe, RecomputeMarksRecordTheModuleAndBothFp8States) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.recompute module=LayerNormLinear#12 fp8=0 forward_fp8=1 "
                          "checkpoint=torch.utils.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=?"));
  EXPECT_FALSE(hook.OnMark(autograd, "fp8audit.te.recomputed module=Linear#1"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.recompute"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::MODULE_RECOMPUTE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].module(), "LayerNormLinear#12");
  EXPECT_EQ(e[0].fp8(), v1::FP8_OFF);
  EXPECT_EQ(e[0].forward_fp8(), v1::FP8_ON);
  EXPECT_EQ(e[0].detail(), "torch.utils.checkpoint");
  EXPECT_EQ(e[1].fp8(), v1::FP8_ON);
  EXPECT_EQ(e[1].forward_fp8(), v1::FP8_MODE_UNSPECIFIED);  // its forward was not seen
  EXPECT_EQ(e[1].detail(), "");
}

TEST(HookProbe, RecomputeMarksRecordAContextThatDiffersFromTheForwards) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.recompute module=Linear#2 fp8=1 forward_fp8=1 "
                          "context=recipe checkpoint=torch.utils.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=1"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].context(), nvtx::kContextRecipe);
  EXPECT_EQ(e[0].fp8(), e[0].forward_fp8());
  EXPECT_EQ(e[0].detail(), "torch.utils.checkpoint");
  EXPECT_EQ(e[1].context(), "");  // the forward's context
}

TEST(HookProbe, RefreshMarksRecordTheModuleTheScaleAndTheCheckpointInBackward) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* autograd = sink.Thread(2, true);
  sink.Use(autograd);
  EXPECT_TRUE(hook.OnMark(autograd,
                          "fp8audit.te.refresh module=LayerNormMLP#3 scale=forward "
                          "checkpoint=transformer_engine.checkpoint"));
  EXPECT_TRUE(hook.OnMark(autograd, "fp8audit.te.refresh scale=live module=Linear#1"));
  EXPECT_FALSE(hook.OnMark(autograd, "fp8audit.te.refreshed module=Linear#1 scale=live"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.refresh"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::WEIGHT_REFRESH);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::BACKWARD);
  EXPECT_EQ(e[0].module(), "LayerNormMLP#3");
  EXPECT_EQ(e[0].context(), nvtx::kScaleForward);
  EXPECT_EQ(e[0].detail(), "transformer_engine.checkpoint");
  EXPECT_EQ(e[1].kind(), v1::WEIGHT_REFRESH);
  EXPECT_EQ(e[1].module(), "Linear#1");  // keys in any order
  EXPECT_EQ(e[1].context(), nvtx::kScaleLive);
  EXPECT_EQ(e[1].detail(), "");  // no checkpoint found
}

TEST(HookProbe, FrozenMarksBecomeOneForwardFrozenScaleEventNamingTheModule) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.frozen module=LayerNormLinear#4"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.frozens module=Linear#1"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.frozen"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::FROZEN_SCALE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::FORWARD);
  EXPECT_EQ(e[0].module(), "LayerNormLinear#4");
  EXPECT_EQ(e[0].thread_id(), 1u);
  EXPECT_NE(e[0].timestamp_ns(), 0u);
}

TEST(HookProbe, AFrozenMarkWithoutAModuleIsRecordedWithNoModuleName) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.frozen state=2"));  // keys, none of them module
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::FROZEN_SCALE);
  EXPECT_EQ(e[0].module(), "");
}

TEST(HookProbe, SiteMarksKeepTheWholeSiteSpacesIncludedAndAnEmptyOne) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.site site=models/llama.py:57 in Block.forward"));
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.site site="));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.sites site=x"));
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind(), v1::CALL_SITE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].pass(), v1::PASS_UNSPECIFIED);
  EXPECT_EQ(e[0].detail(), "models/llama.py:57 in Block.forward");
  EXPECT_EQ(e[1].kind(), v1::CALL_SITE);
  EXPECT_EQ(e[1].detail(), "");
}

TEST(HookProbe, RecipeMarksBecomeRecipeFactsNamingTheClass) {
  TestSink sink;
  HookProbe hook(&sink);
  ThreadState* main = sink.Thread(1);
  sink.Use(main);
  EXPECT_TRUE(hook.OnMark(main, "fp8audit.te.recipe recipe=Float8CurrentScaling"));
  EXPECT_FALSE(hook.OnMark(main, "fp8audit.te.recipes recipe=x"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.recipe"));  // no fields: not the hook's
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind(), v1::RECIPE);
  EXPECT_EQ(e[0].source(), v1::PYTHON_HOOK);
  EXPECT_EQ(e[0].detail(), "Float8CurrentScaling");
}

// ---- pass boundaries and probe choice --------------------------------------------------------

TEST(PassTracker, TheFirstActiveThreadTrainsOthersFollowTheLastBoundary) {
  TestSink sink;
  ThreadState* main = sink.Thread(1);
  ThreadState* other = sink.Thread(3);
  ThreadState* autograd = sink.Thread(2, true);
  for (ThreadState* ts : {main, other, autograd}) sink.OnActivity(ts, "launch");
  EXPECT_EQ(main->role, Role::kTraining);
  EXPECT_EQ(other->role, Role::kOther);
  RawEvent e;
  sink.Record(other, &e);
  EXPECT_EQ(sink.events.back().pass, kPassBackward);  // after BACKWARD_BEGIN
  sink.OnActivity(main, "launch");
  sink.Record(other, &e);
  EXPECT_EQ(sink.events.back().pass, kPassForward);
  EXPECT_EQ(sink.Kinds(), (K{v1::BACKWARD_BEGIN, v1::STEP, v1::BACKWARD_END, v1::STEP}));
}

TEST(ProbeControl, CuptiIsSubscribedOnlyWhereTheModeAndTheJobAskForIt) {
  struct Case {
    ProbeMode mode;
    bool te_loaded, interposed, patterns;
    bool subscribe, provisional;
  };
  const Case cases[] = {
      {ProbeMode::kTeCall, false, true, true, false, false},
      {ProbeMode::kKernel, true, true, false, true, false},
      {ProbeMode::kAll, true, true, false, true, false},
      {ProbeMode::kAuto, true, true, false, false, false},  // a TE job: CUPTI left alone
      {ProbeMode::kAuto, false, true, false, true, true},   // no TE yet: until it loads
      {ProbeMode::kAuto, true, true, true, true, false},    // kernel patterns: kept
      {ProbeMode::kAuto, true, false, false, true, false},  // not preloaded: TE calls unseen
  };
  for (const Case& c : cases) {
    const CuptiPlan plan = PlanCuptiAtCudaInit(c.mode, c.te_loaded, c.interposed, c.patterns);
    EXPECT_EQ(plan.subscribe, c.subscribe) << ProbeModeName(c.mode) << c.te_loaded << c.patterns;
    EXPECT_EQ(plan.provisional, c.provisional) << ProbeModeName(c.mode) << c.te_loaded;
  }
  EXPECT_TRUE(IsTeLibrary("/site/transformer_engine/libtransformer_engine.so"));
  EXPECT_TRUE(IsTeLibrary("libtransformer_engine.so.2"));
  EXPECT_FALSE(IsTeLibrary("/site/transformer_engine_torch.cpython-312.so"));
  EXPECT_FALSE(IsTeLibrary("/lib/libtransformer_engine_notes.txt"));
  EXPECT_EQ(ProbeNames(ProbeBit(Probe::kTeCall) | ProbeBit(Probe::kKernel) |
                       ProbeBit(Probe::kPythonHook)),
            (std::vector<std::string>{"te-call", "kernel", "python-hook"}));
}

TEST(ProbeControl, AProbesEventNamesTheActiveProbes) {
  RawEvent raw;
  raw.kind = RawKind::kProbes;
  raw.count = ProbeBit(Probe::kTeCall) | ProbeBit(Probe::kPythonHook);
  raw.SetText("CUPTI released");
  EventConverter c(FormatHint::kAuto);
  std::vector<v1::Event> out;
  c.Push(raw, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind(), v1::PROBES);
  ASSERT_EQ(out[0].probes_size(), 2);
  EXPECT_EQ(out[0].probes(1), "python-hook");
  EXPECT_EQ(out[0].detail(), "CUPTI released");
}

// ---- kernel probe (CUPTI callback data, a fake driver) ---------------------------------------

constexpr char kBulkName[] =
    "void transformer_engine::delayed_scaling_recipe::amax_and_scale_update_impl::kernel_bulk("
    "float*, AmaxParams, unsigned long, AmaxComputeAlgo, float)";
constexpr char kOtherName[] = "void at::native::elementwise_kernel<128, 4>(int, float)";

struct FakeDriver {
  std::map<uintptr_t, std::string> names;
  std::map<uintptr_t, std::vector<uintptr_t>> graph_nodes;  // graph -> kernel nodes (functions)
  std::map<uintptr_t, float> node_scaled_max;
  bool capturing = false;
};
FakeDriver* g_fake = nullptr;

CUresult FakeFuncName(const char** name, CUfunction f) {
  auto it = g_fake->names.find(reinterpret_cast<uintptr_t>(f));
  *name = it != g_fake->names.end() ? it->second.c_str() : nullptr;
  return CUDA_SUCCESS;
}
CUresult FakeGraphNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  const auto& list = g_fake->graph_nodes[reinterpret_cast<uintptr_t>(g)];
  if (nodes != nullptr) {
    for (size_t i = 0; i < list.size() && i < *n; ++i) {
      nodes[i] = reinterpret_cast<CUgraphNode>(list[i] + 0x100000 * (i + 1));
    }
  }
  *n = list.size();
  return CUDA_SUCCESS;
}
CUresult FakeNodeType(CUgraphNode, CUgraphNodeType* type) {
  *type = CU_GRAPH_NODE_TYPE_KERNEL;
  return CUDA_SUCCESS;
}
thread_local float t_node_value = 0;
thread_local void* t_node_params[5] = {};
CUresult FakeKernelNodeParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* p) {
  const uintptr_t fn = reinterpret_cast<uintptr_t>(node) % 0x100000;
  p->func = reinterpret_cast<CUfunction>(fn);
  t_node_value = g_fake->node_scaled_max[fn];
  t_node_params[4] = &t_node_value;
  p->kernelParams = t_node_params;
  return CUDA_SUCCESS;
}
CUresult FakeCapturing(CUstream, CUstreamCaptureStatus* s) {
  *s = g_fake->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

class KernelProbeTest : public ::testing::Test {
 protected:
  KernelProbeTest() {
    g_fake = &fake_;
    fake_.names[kBulk] = kBulkName;
    fake_.names[kOther] = kOtherName;
    DriverApi cu;
    cu.func_get_name = &FakeFuncName;
    cu.graph_get_nodes = &FakeGraphNodes;
    cu.node_get_type = &FakeNodeType;
    cu.kernel_node_get_params = &FakeKernelNodeParams;
    cu.stream_is_capturing = &FakeCapturing;
    probe_ = std::make_unique<KernelProbe>(&sink_, &classifier_, cu, [this] { ++facts_; });
    main_ = sink_.Thread(1);
    autograd_ = sink_.Thread(2, true);
    sink_.Use(main_);
  }
  ~KernelProbeTest() override { g_fake = nullptr; }

  // One cuLaunchKernel of `fn` with grid `grid_x` and scaled_max `value` (params[4]).
  void Launch(uintptr_t fn, unsigned grid_x, float value, uintptr_t stream = 0x51,
              CUpti_CallbackId cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
    float v = value;
    void* params[5] = {nullptr, nullptr, nullptr, nullptr, &v};
    cuLaunchKernel_params p{};
    p.f = reinterpret_cast<CUfunction>(fn);
    p.gridDimX = grid_x;
    p.hStream = reinterpret_cast<CUstream>(stream);
    p.kernelParams = params;
    CUresult ok = CUDA_SUCCESS;
    CUpti_CallbackData cb{};
    cb.callbackSite = CUPTI_API_EXIT;
    cb.functionParams = &p;
    cb.functionReturnValue = &ok;
    probe_->OnCallback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &cb);
  }
  void Driver(CUpti_CallbackId cbid, const void* params, CUresult result = CUDA_SUCCESS) {
    CUpti_CallbackData cb{};
    cb.callbackSite = CUPTI_API_EXIT;
    cb.functionParams = params;
    cb.functionReturnValue = &result;
    probe_->OnCallback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &cb);
  }
  void Resource(CUpti_CallbackId cbid, uintptr_t graph, uintptr_t exec) {
    CUpti_GraphData g{};
    g.graph = reinterpret_cast<CUgraph>(graph);
    g.graphExec = reinterpret_cast<CUgraphExec>(exec);
    CUpti_ResourceData r{};
    r.resourceDescriptor = &g;
    probe_->OnCallback(CUPTI_CB_DOMAIN_RESOURCE, cbid, &r);
  }
  size_t Updates(RawKind kind = RawKind::kKernelUpdate) const {
    size_t n = 0;
    for (const RawEvent& e : sink_.events) n += e.kind == kind ? e.count : 0;
    return n;
  }

  static constexpr uintptr_t kBulk = 0x10, kOther = 0x20;
  static constexpr float kE4M3 = 448.0f, kE5M2 = 57344.0f;
  FakeDriver fake_;
  TestSink sink_;
  Classifier classifier_;
  std::unique_ptr<KernelProbe> probe_;
  ThreadState* main_ = nullptr;
  ThreadState* autograd_ = nullptr;
  int facts_ = 0;
};

TEST_F(KernelProbeTest, ClassifiedLaunchesAreUpdatesWithTheirScaledMaxAndAllAreCounted) {
  Launch(kOther, 8, 0);
  Launch(kBulk, 3, kE4M3);
  sink_.Use(autograd_);
  Launch(kBulk, 3, kE5M2, 0x51, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz);
  EXPECT_EQ(sink_.launches, 3u);
  EXPECT_EQ(facts_, 1);
  EXPECT_EQ(sink_.traces_ensured, 3);  // at each thread's first sight of a function
  EXPECT_EQ(sink_.Kinds(), (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_BACKWARD}));
  const auto e = sink_.Converted();
  EXPECT_EQ(e[0].source(), v1::KERNEL);
  EXPECT_EQ(e[0].detail(), kBulkName);
  EXPECT_EQ(e[1].detail(), "launch on an autograd thread");
  EXPECT_EQ(main_->ledger.counted_updates, 1u);
}

TEST_F(KernelProbeTest, AChunkedBulkUpdateCountsOnceUnlessSomethingComesBetween) {
  Launch(kBulk, 1364, kE4M3);
  Launch(kBulk, 1364, kE4M3);
  Launch(kBulk, 36, kE4M3);  // 1364 + 1364 + 36 tensors: one update
  EXPECT_EQ(Updates(), 1u);
  Launch(kBulk, 1364, kE4M3);
  Launch(kOther, 1, 0);  // a launch between: the next bulk launch is a new update
  Launch(kBulk, 20, kE4M3);
  EXPECT_EQ(Updates(), 3u);
  Launch(kBulk, 169, kE4M3);  // a full chunk of an older TE build
  Launch(kBulk, 20, kE5M2);   // another scaled_max: another update
  EXPECT_EQ(Updates(), 5u);
  Launch(kBulk, 1364, kE4M3, 0x51);
  Launch(kBulk, 20, kE4M3, 0x52);  // another stream
  EXPECT_EQ(Updates(), 7u);
}

TEST_F(KernelProbeTest, GraphLaunchesCountTheirUpdatesAndLaunchesInCaptureAreNot) {
  fake_.graph_nodes[0x900] = {kBulk, kOther, kBulk};
  fake_.node_scaled_max[kBulk] = kE4M3;
  cuStreamBeginCapture_v2_params begin{};
  Driver(CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, &begin);
  fake_.capturing = true;
  Launch(kBulk, 3, kE4M3);  // recorded into the graph, not run
  fake_.capturing = false;
  Launch(kOther, 1, 0);  // another stream, not capturing: counted
  cuStreamEndCapture_params end{};
  Driver(CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture, &end, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(Updates(), 0u);
  EXPECT_EQ(sink_.launches, 1u);
  Resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, 0x900, 0x901);
  cuGraphLaunch_params launch{};
  launch.hGraph = reinterpret_cast<CUgraphExec>(0x901);
  Driver(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &launch);
  Driver(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &launch);
  EXPECT_EQ(sink_.launches, 7u);
  ASSERT_EQ(sink_.events.size(), 2u);
  EXPECT_EQ(sink_.events[0].count, 2u);  // one event per launch, its multiplicity
  Resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING, 0x900, 0x901);
  Driver(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &launch);  // unknown exec: nothing
  EXPECT_EQ(Updates(), 4u);
  Launch(kBulk, 3, kE4M3);  // the capture ended (even with an error): counted again
  EXPECT_EQ(Updates(), 5u);
}

TEST_F(KernelProbeTest, UpdatesInsideATeCallAreCrossChecksOfIt) {
  main_->ledger.te_call_depth = 1;
  Launch(kBulk, 3, kE4M3);
  main_->ledger.te_call_depth = 0;
  Launch(kBulk, 3, kE4M3);
  EXPECT_EQ(Updates(RawKind::kKernelCrossCheck), 1u);
  EXPECT_EQ(Updates(), 1u);
  EXPECT_EQ(main_->ledger.counted_updates, 1u);
  EXPECT_EQ(sink_.Kinds(), (K{v1::CROSSCHECK_UPDATE_FORWARD, v1::UPDATE_FORWARD}));
}

TEST_F(KernelProbeTest, AFailedLaunchOrAnEntrySiteIsNotALaunchAndUnloadsForgetNames) {
  Launch(kBulk, 3, kE4M3);
  cuLaunchKernel_params p{};
  p.f = reinterpret_cast<CUfunction>(kBulk);
  CUpti_CallbackData cb{};
  cb.callbackSite = CUPTI_API_ENTER;
  cb.functionParams = &p;
  probe_->OnCallback(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &cb);
  CUresult failed = CUDA_ERROR_INVALID_VALUE;
  cb.callbackSite = CUPTI_API_EXIT;
  cb.functionReturnValue = &failed;
  probe_->OnCallback(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &cb);
  EXPECT_EQ(sink_.launches, 1u);
  // The module unloads; the same handle now names another kernel.
  CUpti_ResourceData r{};
  probe_->OnCallback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING, &r);
  fake_.names[kBulk] = kOtherName;
  Launch(kBulk, 3, kE4M3);
  EXPECT_EQ(Updates(), 1u);
}

}  // namespace
}  // namespace fp8audit::agent
