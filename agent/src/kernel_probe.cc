#include "agent/src/kernel_probe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/src/cupti_callbacks.h"
#include "agent/src/lifecycle.h"
#include "agent/src/self_profile.h"

namespace fp8audit::agent {

// ---- KernelProbe: every rule that decides a count ------------------------------------------

KernelProbe::KernelProbe(RecordSink* sink, const Classifier* classifier, const DriverApi& driver,
                         std::function<void()> first_function)
    : sink_(*sink),
      classifier_(classifier),
      cu_(driver),
      first_function_(std::move(first_function)) {}

const FunctionInfo* KernelProbe::Resolve(uintptr_t handle, const char* symbol, bool is_kernel) {
  std::lock_guard<std::mutex> lock(fn_mu_);
  if (!first_seen_) {
    first_seen_ = true;
    if (first_function_) first_function_();
  }
  const uint64_t epoch = function_epoch();
  if (functions_epoch_ != epoch || functions_.size() > (1u << 20)) {
    functions_.clear();
    functions_epoch_ = epoch;
  }
  if (auto it = functions_.find(handle); it != functions_.end()) return it->second;
  const char* mangled = symbol;
  if (mangled == nullptr) {
    if (!is_kernel && cu_.func_get_name != nullptr) {
      cu_.func_get_name(&mangled, reinterpret_cast<CUfunction>(handle));
    } else if (is_kernel && cu_.kernel_get_name != nullptr) {
      cu_.kernel_get_name(&mangled, reinterpret_cast<CUkernel>(handle));
    }
  }
  owned_.push_back(std::make_unique<FunctionInfo>());
  FunctionInfo* fi = owned_.back().get();
  classifier_.Classify(mangled, fi);
  functions_.emplace(handle, fi);
  return fi;
}

// The offset of scaled_max in a packed argument buffer, asked of the driver once per function.
int64_t KernelProbe::ScaledMaxOffset(const FunctionInfo* fi, uintptr_t handle, bool is_kernel) {
  int64_t offset = fi->scaled_max_offset.load(std::memory_order_acquire);
  if (offset != -2) return offset;
  std::lock_guard<std::mutex> lock(fn_mu_);
  size_t off = 0, size = 0;
  const auto index = static_cast<size_t>(fi->scaled_max_param);
  bool ok = false;
  if (!is_kernel && cu_.func_get_param_info != nullptr) {
    ok = cu_.func_get_param_info(reinterpret_cast<CUfunction>(handle), index, &off, &size) ==
         CUDA_SUCCESS;
  }
  if (!ok && cu_.kernel_get_param_info != nullptr) {
    ok = cu_.kernel_get_param_info(reinterpret_cast<CUkernel>(handle), index, &off, &size) ==
         CUDA_SUCCESS;
  }
  offset = ok && size == sizeof(float) ? static_cast<int64_t>(off) : -1;
  fi->scaled_max_offset.store(offset, std::memory_order_release);
  return offset;
}

// Reads the float scaled_max from the host-side launch arguments (never device memory).
ScaledMax KernelProbe::ReadScaledMax(const FunctionInfo* fi, uintptr_t handle, bool is_kernel,
                                     void** params, void** extra) {
  if (fi->scaled_max_param < 0) return ScaledMax::kNotRead;
  float value = 0;
  if (params != nullptr) {
    const void* p = params[fi->scaled_max_param];
    if (p == nullptr) return ScaledMax::kNotRead;
    std::memcpy(&value, p, sizeof(value));
    return ClassifyScaledMax(value);
  }
  if (extra == nullptr) return ScaledMax::kNotRead;
  const int64_t signed_offset = ScaledMaxOffset(fi, handle, is_kernel);
  if (signed_offset < 0) return ScaledMax::kNotRead;
  const char* buffer = nullptr;
  size_t size = 0;
  for (int i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<const char*>(extra[i + 1]);
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != nullptr) {
      std::memcpy(&size, extra[i + 1], sizeof(size));
    }
  }
  const auto offset = static_cast<size_t>(signed_offset);
  if (buffer == nullptr || offset + sizeof(float) > size) return ScaledMax::kNotRead;
  std::memcpy(&value, buffer + offset, sizeof(value));
  return ClassifyScaledMax(value);
}

bool KernelProbe::Capturing(CUstream stream) const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cu_.stream_is_capturing != nullptr &&
         cu_.stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// A classified launch inside a TE update call the te-call probe recorded is a cross-check of it.
void KernelProbe::RecordUpdate(ThreadState* ts, const FunctionInfo* fi, ScaledMax scaled_max,
                               uint64_t count) {
  UpdateLedger& ledger = LedgerOf(ts);
  RawEvent e;
  e.kind = ledger.te_call_depth > 0 ? RawKind::kKernelCrossCheck : RawKind::kKernelUpdate;
  if (e.kind == RawKind::kKernelUpdate) ledger.counted_updates += count;
  e.fn = fi;
  e.rule = fi->event;
  e.scaled_max = scaled_max;
  e.count = count;
  sink_.Record(ts, &e);
}

// Hot path: one launch on this thread.
void KernelProbe::OnLaunch(const void* handle_ptr, const char* symbol, void** params, void** extra,
                           CUstream stream, unsigned grid_x) {
  if (active_captures_.load(std::memory_order_relaxed) > 0 && Capturing(stream)) return;
  ThreadState* ts = sink_.Self();
  if (ts == nullptr) return;
  sink_.CountLaunches(1);
  KernelThreadState& k = KernelStateOf(ts);
  const uint64_t seq = ++k.launch_seq;
  sink_.OnActivity(ts, "launch");
  const auto handle = reinterpret_cast<uintptr_t>(handle_ptr);
  const uint64_t epoch = function_epoch();
  if (k.cache_epoch != epoch) {
    for (auto& e : k.cache) e = {};
    k.cache_epoch = epoch;
  }
  const FunctionInfo* fi = k.CacheLookup(handle);
  if (fi == nullptr) {
    fi = Resolve(handle, symbol, false);
    k.CacheInsert(handle, fi);
    sink_.EnsureTrace();
  }
  if (fi->event == RuleEvent::kNone) return;
  const ScaledMax scaled_max = ReadScaledMax(fi, handle, false, params, extra);
  if (fi->chunked) {
    // The rest of one update: this thread's very next launch after a full chunk, same kernel,
    // same scaled_max, same stream (TE launches nothing else in between; a new update starts
    // with other kernels, its amax reduction).
    const bool continues = k.full_chunk_seq != 0 && k.full_chunk_seq + 1 == seq &&
                           k.full_chunk_fn == fi && k.full_chunk_scaled_max == scaled_max &&
                           k.full_chunk_stream == stream;
    k.full_chunk_seq = KernelClassifier::IsFullUpdateChunk(grid_x) ? seq : 0;
    k.full_chunk_fn = fi;
    k.full_chunk_scaled_max = scaled_max;
    k.full_chunk_stream = stream;
    if (continues) return;
  }
  RecordUpdate(ts, fi, scaled_max, 1);
}

void KernelProbe::Enumerate(CUgraph graph, GraphInfo* info, int depth) {
  size_t n = 0;
  if (cu_.graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0 || n > (1u << 20)) return;
  std::vector<CUgraphNode> nodes(n);
  if (cu_.graph_get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
  nodes.resize(std::min(n, nodes.size()));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    if (cu_.node_get_type(node, &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS_v2 p{};
      if (cu_.kernel_node_get_params == nullptr ||
          cu_.kernel_node_get_params(node, &p) != CUDA_SUCCESS) {
        ++info->kernels;
        continue;
      }
      ++info->kernels;
      const bool is_kernel = p.func == nullptr;
      const uintptr_t handle =
          is_kernel ? reinterpret_cast<uintptr_t>(p.kern) : reinterpret_cast<uintptr_t>(p.func);
      if (handle == 0) continue;
      const FunctionInfo* fi = Resolve(handle, nullptr, is_kernel);
      if (fi->event == RuleEvent::kNone) continue;
      const ScaledMax sm = ReadScaledMax(fi, handle, is_kernel, p.kernelParams, p.extra);
      bool merged = false;
      for (auto& g : info->updates) {
        if (g.fn == fi && g.scaled_max == sm) {
          ++g.count;
          merged = true;
        }
      }
      if (!merged) info->updates.push_back({fi, sm, 1});
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && depth < 8 && cu_.child_graph != nullptr) {
      CUgraph child = nullptr;
      if (cu_.child_graph(node, &child) == CUDA_SUCCESS && child != nullptr) {
        Enumerate(child, info, depth + 1);
      }
    }
  }
}

void KernelProbe::OnGraphExecCreated(const CUpti_GraphData* g) {
  if (g == nullptr || g->graph == nullptr || g->graphExec == nullptr ||
      cu_.graph_get_nodes == nullptr || cu_.node_get_type == nullptr) {
    return;
  }
  auto info = std::make_shared<GraphInfo>();
  Enumerate(g->graph, info.get(), 0);
  std::lock_guard<std::mutex> lock(graph_mu_);
  graphs_[reinterpret_cast<uintptr_t>(g->graphExec)] = std::move(info);
}

void KernelProbe::OnGraphExecDestroy(const CUpti_GraphData* g) {
  if (g == nullptr) return;
  std::lock_guard<std::mutex> lock(graph_mu_);
  graphs_.erase(reinterpret_cast<uintptr_t>(g->graphExec));
}

void KernelProbe::OnGraphLaunch(CUgraphExec exec) {
  ThreadState* ts = sink_.Self();
  if (ts == nullptr) return;
  std::shared_ptr<const GraphInfo> info;
  {
    std::lock_guard<std::mutex> lock(graph_mu_);
    auto it = graphs_.find(reinterpret_cast<uintptr_t>(exec));
    if (it != graphs_.end()) info = it->second;
  }
  if (info == nullptr) return;  // instantiated before the agent attached
  sink_.CountLaunches(info->kernels);
  sink_.OnActivity(ts, "launch");
  sink_.EnsureTrace();
  for (const auto& g : info->updates) RecordUpdate(ts, g.fn, g.scaled_max, g.count);
}

void KernelProbe::OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite != CUPTI_API_EXIT) return;
    const bool ok = cb->functionReturnValue == nullptr ||
                    *static_cast<const CUresult*>(cb->functionReturnValue) == CUDA_SUCCESS;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture ||
        cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz) {
      // Ends the capture whatever it returns (an invalidated capture ends with an error).
      int n = active_captures_.load();
      while (n > 0 && !active_captures_.compare_exchange_weak(n, n - 1)) {
      }
      return;
    }
    if (!ok) return;
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture:
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz:
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz:
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph:
      case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz:
        active_captures_.fetch_add(1);
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: {
        const auto* p = static_cast<const cuLaunchKernel_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, p->extra, p->hStream, p->gridDimX);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
        const auto* p = static_cast<const cuLaunchKernel_ptsz_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, p->extra, p->hStream, p->gridDimX);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: {
        const auto* p = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, p->extra,
                 p->config != nullptr ? p->config->hStream : nullptr,
                 p->config != nullptr ? p->config->gridDimX : 0);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
        const auto* p = static_cast<const cuLaunchKernelEx_ptsz_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, p->extra,
                 p->config != nullptr ? p->config->hStream : nullptr,
                 p->config != nullptr ? p->config->gridDimX : 0);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: {
        const auto* p = static_cast<const cuLaunchCooperativeKernel_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, nullptr, p->hStream, p->gridDimX);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
        const auto* p =
            static_cast<const cuLaunchCooperativeKernel_ptsz_params*>(cb->functionParams);
        OnLaunch(p->f, cb->symbolName, p->kernelParams, nullptr, p->hStream, p->gridDimX);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch: {
        OnGraphLaunch(static_cast<const cuGraphLaunch_params*>(cb->functionParams)->hGraph);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
        OnGraphLaunch(
            static_cast<const cuGraphLaunch_ptsz_params*>(cb->functionParams)->hGraphExec);
        break;
      }
      default:
        break;
    }
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const auto* r = static_cast<const CUpti_ResourceData*>(data);
    switch (cbid) {
      case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED:
        OnGraphExecCreated(static_cast<const CUpti_GraphData*>(r->resourceDescriptor));
        break;
      case CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING:
        OnGraphExecDestroy(static_cast<const CUpti_GraphData*>(r->resourceDescriptor));
        break;
      case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING:
        fn_epoch_.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        break;
    }
  }
}

// ---- Subscribing ---------------------------------------------------------------------------

#if !FP8AUDIT_AGENT_CUPTI

int SetLaunchProbe(bool) { return -1; }
bool DetachKernelProbe() { return false; }

AttachResult AttachKernelProbe(const KernelProbeHost&, bool, std::string* why) {
  *why = "this agent was built without CUPTI";
  return AttachResult::kUnavailable;
}

#else

namespace {

// The subscription, once attached: the loader's tables (never freed) and the subscriber handle.
const CuptiLoader* g_loader = nullptr;
std::atomic<CUpti_SubscriberHandle> g_subscriber{nullptr};  // set once the callbacks are enabled

void CUPTIAPI OnCallback(void* probe, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  // The handler's kind is only worked out when self-profiling (off: one relaxed load).
  const HandlerTimer timer(!SelfProfileOn()                     ? Handler::kLaunch
                           : domain == CUPTI_CB_DOMAIN_RESOURCE ? Handler::kResource
                           : IsLaunchCallback(cbid)             ? Handler::kLaunch
                                                                : Handler::kDriverOther);
  static_cast<KernelProbe*>(probe)->OnCallback(domain, cbid, data);
}

// Every callback the probe enables, off (0) or on (1).
void EnableAll(const CuptiApi& cupti, uint32_t on, CUpti_SubscriberHandle subscriber) {
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kGraphLaunchCallbacks) {
    cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kCaptureCallbacks) {
    cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kResourceCallbacks) {
    cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_RESOURCE, id);
  }
}

}  // namespace

int SetLaunchProbe(bool on) {
  CUpti_SubscriberHandle subscriber = g_subscriber.load(std::memory_order_acquire);
  if (subscriber == nullptr) return -1;
  const CuptiApi& cupti = g_loader->cupti();
  int failed = 0;
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    failed |= cupti.enable_callback(on ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) !=
              CUPTI_SUCCESS;
  }
  for (CUpti_CallbackId id : kGraphLaunchCallbacks) {
    cupti.enable_callback(on ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  return failed != 0 ? -1 : 0;
}

bool DetachKernelProbe() {
  CUpti_SubscriberHandle subscriber = g_subscriber.exchange(nullptr, std::memory_order_acq_rel);
  if (subscriber == nullptr) return false;
  const CuptiApi& cupti = g_loader->cupti();
  EnableAll(cupti, 0, subscriber);
  return cupti.unsubscribe == nullptr || cupti.unsubscribe(subscriber) == CUPTI_SUCCESS;
}

AttachResult AttachKernelProbe(const KernelProbeHost& host, bool from_driver, std::string* why) {
  static std::atomic<bool> attempted{false};
  if (attempted.exchange(true)) {
    *why = "already attempted";
    return AttachResult::kUnavailable;
  }
  // Never freed (the probe calls its tables), and held by a static even when loading fails.
  static CuptiLoader* const loader = new CuptiLoader();
  const bool loaded = loader->Load(from_driver, why);
  if (!loader->cupti_path().empty() && host.cupti_opened) {
    host.cupti_opened(loader->cupti_path(), loader->cupti_api_version());
  }
  if (!loaded) return AttachResult::kUnavailable;
  g_loader = loader;
  const CuptiApi& cupti = loader->cupti();

  static KernelProbe* probe =
      new KernelProbe(host.sink, host.classifier, loader->driver(), host.first_function);
  RegisterForkMutex(&probe->functions_mutex());
  RegisterForkMutex(&probe->graphs_mutex());

  CUpti_SubscriberHandle subscriber = nullptr;
  CUptiResult r = CUPTI_SUCCESS;
  std::string other;
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  if (cupti.subscribe_v2 != nullptr) {
    char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "fp8audit";
    params.oldSubscriberName = old_name;
    params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
    r = cupti.subscribe_v2(&subscriber, &OnCallback, probe, &params);
    other = old_name;
  } else {
    r = cupti.subscribe(&subscriber, &OnCallback, probe);
  }
#else
  r = cupti.subscribe(&subscriber, &OnCallback, probe);
#endif
  if (r != CUPTI_SUCCESS) {
    const bool held = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    *why = "CUPTI refused the subscription: " + loader->ResultText(r) +
           (other.empty() ? std::string() : "; held by " + other);
    return held ? AttachResult::kHeld : AttachResult::kUnavailable;
  }
  // cuLaunchKernel is required; the other entry points (and the capture bookkeeping) are enabled
  // where this CUPTI knows them.
  r = cupti.enable_callback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, kLaunchCallbacks[0]);
  if (r != CUPTI_SUCCESS) {
    *why = "CUPTI could not enable the launch callback (" + loader->ResultText(r) + ")";
    if (cupti.unsubscribe != nullptr) cupti.unsubscribe(subscriber);
    return AttachResult::kUnavailable;
  }
  EnableAll(cupti, 1, subscriber);
  g_subscriber.store(subscriber, std::memory_order_release);
  return AttachResult::kAttached;
}

#endif  // FP8AUDIT_AGENT_CUPTI

}  // namespace fp8audit::agent
