// Kernel-launch probe: CUPTI callbacks on the driver's launch entry points (cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel, their _ptsz forms, cuGraphLaunch[_ptsz]), stream
// capture and graph-exec creation. KernelProbe holds every rule that decides a count and is driven
// by CUPTI's callback data alone; it is handed the driver's function table (DriverApi, filled by
// CuptiLoader), the kernel classifier's rules and a RecordSink, and knows nothing of the agent:
// tests/agent drive it with made-up callback data and a fake driver table. Without CUPTI headers
// it builds against the stand-in types of cupti_types.h (AttachKernelProbe then steps aside).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/src/cupti_loader.h"
#include "agent/src/cupti_types.h"
#include "agent/src/kernel_classifier.h"
#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

struct ThreadState;

// The kernel probe's part of a thread's state (thread_state.h holds it).
inline constexpr size_t kCacheSize = 512;  // kernel functions cached per thread (power of two)
struct KernelThreadState {
  struct CacheEntry {
    uintptr_t key = 0;
    const FunctionInfo* info = nullptr;
  };
  CacheEntry cache[kCacheSize];
  uint64_t cache_epoch = 0;
  // Launches on this thread, and the last chunked update launch that filled a whole chunk (its
  // launch number, function, scaled_max and stream): the next launch may continue that update.
  uint64_t launch_seq = 0;
  uint64_t full_chunk_seq = 0;
  const FunctionInfo* full_chunk_fn = nullptr;
  ScaledMax full_chunk_scaled_max = ScaledMax::kNotRead;
  const void* full_chunk_stream = nullptr;

  const FunctionInfo* CacheLookup(uintptr_t key) const {
    const CacheEntry& e = cache[Slot(key)];
    return e.key == key ? e.info : nullptr;
  }
  void CacheInsert(uintptr_t key, const FunctionInfo* info) { cache[Slot(key)] = {key, info}; }
  static size_t Slot(uintptr_t key) {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 40) &
           (kCacheSize - 1);
  }
};
KernelThreadState& KernelStateOf(ThreadState* ts);

enum class AttachResult : uint8_t {
  kAttached,
  kHeld,         // another tool holds CUPTI (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
  kUnavailable,  // no driver, no CUPTI, or CUPTI refused otherwise
};

// What the subscribing probe is handed by its caller (the agent, probe_control.cc).
struct KernelProbeHost {
  RecordSink* sink = nullptr;
  const Classifier* classifier = nullptr;
  // Called once, before the first kernel function is classified (the driver is initialised then).
  std::function<void()> first_function;
  // Called with the CUPTI opened (its path) and its API version, before subscribing.
  std::function<void(const std::string& path, uint32_t api_version)> cupti_opened;
};

// Loads the driver and CUPTI (CuptiLoader) and subscribes, once per process (`from_driver`:
// called from InitializeInjection, the driver is loading us). `why` says why not.
AttachResult AttachKernelProbe(const KernelProbeHost& host, bool from_driver, std::string* why);
// Turns every callback off and unsubscribes, so that another tool can subscribe. True when a
// subscription was released.
bool DetachKernelProbe();

// Turns the launch callbacks (kernel and graph launches) off or on for benchmarks that compare
// steps with and without the probe in one process. Launches while it is off are not recorded or
// counted. Returns 0, or -1 when no probe is attached.
int SetLaunchProbe(bool on);

// Graph execs: what one launch of each holds.
struct GraphInfo {
  uint64_t kernels = 0;
  struct Group {
    const FunctionInfo* fn;
    ScaledMax scaled_max;
    uint64_t count;
  };
  std::vector<Group> updates;
};

class KernelProbe {
 public:
  // `first_function`: called once, under the probe's lock, before the first kernel function is
  // classified (the agent collects the CUDA facts there: the driver is initialised then).
  KernelProbe(RecordSink* sink, const Classifier* classifier, const DriverApi& driver,
              std::function<void()> first_function = {});
  KernelProbe(const KernelProbe&) = delete;
  KernelProbe& operator=(const KernelProbe&) = delete;

  // CUPTI's callback: driver API (exit site) and resource domains.
  void OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);

  // Kernel functions are cached per thread by handle until a module unloads.
  uint64_t function_epoch() const { return fn_epoch_.load(std::memory_order_relaxed); }
  std::mutex& functions_mutex() { return fn_mu_; }
  std::mutex& graphs_mutex() { return graph_mu_; }

 private:
  void OnLaunch(const void* handle, const char* symbol, void** params, void** extra,
                CUstream stream, unsigned grid_x);
  void OnGraphLaunch(CUgraphExec exec);
  void OnGraphExecCreated(const CUpti_GraphData* g);
  void OnGraphExecDestroy(const CUpti_GraphData* g);
  void Enumerate(CUgraph graph, GraphInfo* info, int depth);
  bool Capturing(CUstream stream) const;
  const FunctionInfo* Resolve(uintptr_t handle, const char* symbol, bool is_kernel);
  int64_t ScaledMaxOffset(const FunctionInfo* fi, uintptr_t handle, bool is_kernel);
  ScaledMax ReadScaledMax(const FunctionInfo* fi, uintptr_t handle, bool is_kernel, void** params,
                          void** extra);
  void RecordUpdate(ThreadState* ts, const FunctionInfo* fi, ScaledMax scaled_max, uint64_t count);

  RecordSink& sink_;
  const KernelClassifier classifier_;
  DriverApi cu_;
  std::function<void()> first_function_;
  // Kernel functions by handle (CUfunction or CUkernel), shared by all threads; every one lives as
  // long as the probe (events point at them; the agent's probe is never destroyed).
  std::mutex fn_mu_;
  std::unordered_map<uintptr_t, FunctionInfo*> functions_;
  std::vector<std::unique_ptr<FunctionInfo> > owned_;
  uint64_t functions_epoch_ = 0;
  bool first_seen_ = false;
  std::atomic<uint64_t> fn_epoch_{1};
  std::mutex graph_mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<const GraphInfo> > graphs_;
  // Stream captures in progress (cuStreamBeginCapture..EndCapture). While any is, a launch into a
  // capturing stream only records a graph node: it is counted when the graph is launched.
  std::atomic<int> active_captures_{0};
};

}  // namespace fp8audit::agent
