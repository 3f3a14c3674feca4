// The kernel probe on CUPTI callback data and a fake driver table, through a recording sink.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/src/kernel_probe.h"
#include "agent/src/thread_state.h"
#include "tests/agent/probes_test_util.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

using testing::K;
using testing::TestSink;

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
