#include "agent/src/kernel_probe.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/src/cupti_search.h"
#include "agent/src/recorder.h"
#include "agent/src/self_profile.h"

#if FP8AUDIT_AGENT_CUPTI
#include "agent/src/cupti_callbacks.h"
#endif

namespace fp8audit::agent {

std::string ParseNvidiaDriverRelease(std::string_view text) {
  // "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ..."
  const size_t at = text.find("Kernel Module");
  if (at == std::string_view::npos) return {};
  text.remove_prefix(at);
  const size_t eol = text.find('\n');
  text = text.substr(0, eol);
  while (!text.empty()) {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const size_t end = std::min(text.find_first_of(" \t"), text.size());
    const std::string_view token = text.substr(0, end);
    text.remove_prefix(end);
    const bool version = token.size() <= 32 && token.find('.') != std::string_view::npos &&
                         token.find_first_not_of("0123456789.") == std::string_view::npos &&
                         token.front() != '.';
    if (version) return std::string(token);
  }
  return {};
}

bool CudaDriverLoaded() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

namespace {

std::string ReadDriverRelease() {
  const int fd = ::open("/proc/driver/nvidia/version", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[512] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  return n > 0 ? ParseNvidiaDriverRelease(std::string_view(buf, static_cast<size_t>(n))) : "";
}

std::string VersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

void CollectCudaFactsOnce() {
  static std::atomic<bool> once{false};
  if (once.load(std::memory_order_acquire) || once.exchange(true)) return;
  std::string gpu, driver = ReadDriverRelease(), cuda;
  int version = 0;
  using RuntimeVersion = int (*)(int*);
  if (auto fn = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion"));
      fn != nullptr && fn(&version) == 0 && version > 0) {
    cuda = VersionText(version);
  }
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); lib != nullptr) {
    using CtxGetDevice = int (*)(int*);
    using DeviceGetName = int (*)(char*, int, int);
    using DriverGetVersion = int (*)(int*);
    auto ctx_get_device = reinterpret_cast<CtxGetDevice>(dlsym(lib, "cuCtxGetDevice"));
    auto device_get_name = reinterpret_cast<DeviceGetName>(dlsym(lib, "cuDeviceGetName"));
    auto driver_get_version = reinterpret_cast<DriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
    int dev = 0;
    char name[256] = {};
    if (ctx_get_device != nullptr && device_get_name != nullptr && ctx_get_device(&dev) == 0 &&
        device_get_name(name, sizeof(name) - 1, dev) == 0) {
      gpu = name;
    }
    if (driver_get_version != nullptr && driver_get_version(&version) == 0) {
      const std::string api = "CUDA " + VersionText(version);
      driver = driver.empty() ? api : driver + " (" + api + ")";
    }
    dlclose(lib);
  }
  Agent::Get().SetCudaFacts(gpu, driver, cuda);
}

#if !FP8AUDIT_AGENT_CUPTI

int SetLaunchProbe(bool) { return -1; }
bool DetachKernelProbe() { return false; }

AttachResult AttachKernelProbe(bool, std::string* why) {
  *why = "this agent was built without CUPTI";
  return AttachResult::kUnavailable;
}

#else

// ---- KernelProbe: every rule that decides a count ------------------------------------------

KernelProbe::KernelProbe(RecordSink* sink, const Classifier* classifier, const DriverApi& driver,
                         std::function<void()> first_function)
    : sink_(*sink),
      classifier_(*classifier),
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
  fi->name = mangled != nullptr ? Demangle(mangled) : std::string("<unnamed kernel>");
  if (const PatternRule* rule = classifier_.Match(fi->name); rule != nullptr) {
    fi->event = rule->event;
    fi->chunked = rule->chunked;
    if (rule->scaled_max_param >= 0 && ParameterIsFloat(fi->name, rule->scaled_max_param)) {
      fi->scaled_max_param = rule->scaled_max_param;
    }
  }
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
  RawEvent e;
  e.kind = ts->te_call_depth > 0 ? RawKind::kKernelCrossCheck : RawKind::kKernelUpdate;
  if (e.kind == RawKind::kKernelUpdate) ts->counted_updates += count;
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
  const uint64_t seq = ++ts->launch_seq;
  sink_.OnActivity(ts, "launch");
  const auto handle = reinterpret_cast<uintptr_t>(handle_ptr);
  const uint64_t epoch = function_epoch();
  if (ts->cache_epoch != epoch) {
    for (auto& e : ts->cache) e = {};
    ts->cache_epoch = epoch;
  }
  const FunctionInfo* fi = ts->CacheLookup(handle);
  if (fi == nullptr) {
    fi = Resolve(handle, symbol, false);
    ts->CacheInsert(handle, fi);
    sink_.EnsureTrace();
  }
  if (fi->event == RuleEvent::kNone) return;
  const ScaledMax scaled_max = ReadScaledMax(fi, handle, false, params, extra);
  if (fi->chunked) {
    // The rest of one update: this thread's very next launch after a full chunk, same kernel,
    // same scaled_max, same stream (TE launches nothing else in between; a new update starts
    // with other kernels, its amax reduction).
    const bool continues = ts->full_chunk_seq != 0 && ts->full_chunk_seq + 1 == seq &&
                           ts->full_chunk_fn == fi && ts->full_chunk_scaled_max == scaled_max &&
                           ts->full_chunk_stream == stream;
    ts->full_chunk_seq = IsFullUpdateChunk(grid_x) ? seq : 0;
    ts->full_chunk_fn = fi;
    ts->full_chunk_scaled_max = scaled_max;
    ts->full_chunk_stream = stream;
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

// ---- Attaching to CUPTI -------------------------------------------------------------------

namespace {

struct Cupti {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*get_version)(uint32_t*) = nullptr;
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                              CUpti_SubscriberParams*) = nullptr;
#endif
};
Cupti g_cupti;
DriverApi g_cu;
std::atomic<CUpti_SubscriberHandle> g_subscriber{nullptr};  // set once the callbacks are enabled
std::atomic<KernelProbe*> g_probe{nullptr};                 // never freed

template <typename Fn>
void Load(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  // The handler's kind is only worked out when self-profiling (off: one relaxed load).
  const HandlerTimer timer(!SelfProfileOn()                     ? Handler::kLaunch
                           : domain == CUPTI_CB_DOMAIN_RESOURCE ? Handler::kResource
                           : IsLaunchCallback(cbid)             ? Handler::kLaunch
                                                                : Handler::kDriverOther);
  if (KernelProbe* probe = g_probe.load(std::memory_order_acquire); probe != nullptr) {
    probe->OnCallback(domain, cbid, data);
  }
}

int CollectLoaded(dl_phdr_info* info, size_t, void* data) {
  auto* loaded = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' && loaded->size() < 4096) {
    loaded->emplace_back(info->dlpi_name);
  }
  return 0;
}

// Opens the CUPTI of the job's CUDA major version (cupti_search.h). `loaded`: the library's path;
// `tried`: what was tried, for the line saying why none could be opened.
void* OpenCupti(std::string* loaded, std::string* tried) {
  CuptiQuery q;
  dl_iterate_phdr(&CollectLoaded, &q.loaded);
  using RuntimeVersion = int (*)(int*);
  if (auto fn = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion"));
      fn != nullptr && fn(&q.runtime_version) != 0) {
    q.runtime_version = 0;
  }
  if (g_cu.driver_get_version == nullptr || g_cu.driver_get_version(&q.driver_version) != 0) {
    q.driver_version = 0;
  }
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0' && q.cuda_home.empty()) {
      q.cuda_home = v;
    }
  }
  const SystemFileView fs;
  const int major = CudaMajor(q, fs);
  const std::vector<std::string> candidates = CuptiCandidates(q, fs);
  std::string first_error;
  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      if (first_error.empty() && e != nullptr) first_error = e;
      continue;
    }
    link_map* map = nullptr;
    const std::string where =
        dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr
            ? std::string(map->l_name)
            : name;
    const std::string real = fs.RealPath(where);
    *loaded = real.empty() ? where : real;
    return h;
  }
  *tried = (major > 0 ? "for CUDA " + std::to_string(major) : std::string("for an unknown CUDA")) +
           ", tried " + std::to_string(candidates.size()) + ": " + candidates.front() +
           (candidates.size() > 1 ? " ... " + candidates.back() : std::string()) +
           (first_error.empty() ? std::string() : "; " + first_error);
  return nullptr;
}

// Every callback the probe enables, off (0) or on (1).
void EnableAll(uint32_t on, CUpti_SubscriberHandle subscriber) {
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    g_cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kGraphLaunchCallbacks) {
    g_cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kCaptureCallbacks) {
    g_cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : kResourceCallbacks) {
    g_cupti.enable_callback(on, subscriber, CUPTI_CB_DOMAIN_RESOURCE, id);
  }
}

}  // namespace

int SetLaunchProbe(bool on) {
  CUpti_SubscriberHandle subscriber = g_subscriber.load(std::memory_order_acquire);
  if (subscriber == nullptr) return -1;
  int failed = 0;
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    failed |= g_cupti.enable_callback(on ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) !=
              CUPTI_SUCCESS;
  }
  for (CUpti_CallbackId id : kGraphLaunchCallbacks) {
    g_cupti.enable_callback(on ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  return failed != 0 ? -1 : 0;
}

bool DetachKernelProbe() {
  CUpti_SubscriberHandle subscriber = g_subscriber.exchange(nullptr, std::memory_order_acq_rel);
  if (subscriber == nullptr) return false;
  EnableAll(0, subscriber);
  return g_cupti.unsubscribe == nullptr || g_cupti.unsubscribe(subscriber) == CUPTI_SUCCESS;
}

AttachResult AttachKernelProbe(bool from_driver, std::string* why) {
  static std::atomic<bool> attempted{false};
  Agent& a = Agent::Get();
  if (!a.enabled() || attempted.exchange(true)) {
    *why = "already attempted";
    return AttachResult::kUnavailable;
  }

  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr && from_driver) cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    const char* e = dlerror();
    *why = std::string("no CUDA driver (") + (e != nullptr ? e : "libcuda.so.1") + ")";
    return AttachResult::kUnavailable;
  }
  Load(cuda, "cuFuncGetName", &g_cu.func_get_name);
  Load(cuda, "cuFuncGetParamInfo", &g_cu.func_get_param_info);
  Load(cuda, "cuKernelGetName", &g_cu.kernel_get_name);
  Load(cuda, "cuKernelGetParamInfo", &g_cu.kernel_get_param_info);
  Load(cuda, "cuGraphGetNodes", &g_cu.graph_get_nodes);
  Load(cuda, "cuGraphNodeGetType", &g_cu.node_get_type);
  Load(cuda, "cuGraphKernelNodeGetParams_v2", &g_cu.kernel_node_get_params);
  Load(cuda, "cuGraphChildGraphNodeGetGraph", &g_cu.child_graph);
  Load(cuda, "cuDriverGetVersion", &g_cu.driver_get_version);
  Load(cuda, "cuCtxGetDevice", &g_cu.ctx_get_device);
  Load(cuda, "cuDeviceGetName", &g_cu.device_get_name);
  Load(cuda, "cuStreamIsCapturing", &g_cu.stream_is_capturing);

  std::string tried, cupti_path;
  void* lib = OpenCupti(&cupti_path, &tried);
  if (lib == nullptr) {
    *why = "no CUPTI could be loaded (" + tried + ")";
    return AttachResult::kUnavailable;
  }
  Load(lib, "cuptiSubscribe", &g_cupti.subscribe);
  Load(lib, "cuptiUnsubscribe", &g_cupti.unsubscribe);
  Load(lib, "cuptiEnableCallback", &g_cupti.enable_callback);
  Load(lib, "cuptiGetResultString", &g_cupti.result_string);
  Load(lib, "cuptiGetVersion", &g_cupti.get_version);
  uint32_t api_version = 0;
  if (g_cupti.get_version == nullptr || g_cupti.get_version(&api_version) != CUPTI_SUCCESS) {
    api_version = 0;
  }
  a.SetCupti(cupti_path, api_version);
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  Load(lib, "cuptiSubscribe_v2", &g_cupti.subscribe_v2);
#endif
  if (g_cupti.subscribe == nullptr || g_cupti.enable_callback == nullptr) {
    *why = "this CUPTI lacks cuptiSubscribe or cuptiEnableCallback";
    return AttachResult::kUnavailable;
  }
  auto result_text = [](CUptiResult r) {
    const char* s = nullptr;
    if (g_cupti.result_string != nullptr) g_cupti.result_string(r, &s);
    return std::string(s != nullptr ? s : "error ") + (s != nullptr ? "" : std::to_string(r));
  };

  static KernelProbe* probe =
      new KernelProbe(&a, &a.classifier(), g_cu, [] { CollectCudaFactsOnce(); });
  RegisterForkMutex(&probe->functions_mutex());
  RegisterForkMutex(&probe->graphs_mutex());
  g_probe.store(probe, std::memory_order_release);

  CUpti_SubscriberHandle subscriber = nullptr;
  CUptiResult r = CUPTI_SUCCESS;
  std::string other;
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  if (g_cupti.subscribe_v2 != nullptr) {
    char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "fp8audit";
    params.oldSubscriberName = old_name;
    params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
    r = g_cupti.subscribe_v2(&subscriber, &OnCallback, nullptr, &params);
    other = old_name;
  } else {
    r = g_cupti.subscribe(&subscriber, &OnCallback, nullptr);
  }
#else
  r = g_cupti.subscribe(&subscriber, &OnCallback, nullptr);
#endif
  if (r != CUPTI_SUCCESS) {
    const bool held = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    *why = "CUPTI refused the subscription: " + result_text(r) +
           (other.empty() ? std::string() : "; held by " + other);
    return held ? AttachResult::kHeld : AttachResult::kUnavailable;
  }
  // cuLaunchKernel is required; the other entry points (and the capture bookkeeping) are enabled
  // where this CUPTI knows them.
  r = g_cupti.enable_callback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, kLaunchCallbacks[0]);
  if (r != CUPTI_SUCCESS) {
    *why = "CUPTI could not enable the launch callback (" + result_text(r) + ")";
    if (g_cupti.unsubscribe != nullptr) g_cupti.unsubscribe(subscriber);
    return AttachResult::kUnavailable;
  }
  EnableAll(1, subscriber);
  g_subscriber.store(subscriber, std::memory_order_release);
  return AttachResult::kAttached;
}

#endif  // FP8AUDIT_AGENT_CUPTI

}  // namespace fp8audit::agent
