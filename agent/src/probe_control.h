// Which probes count FP8 state updates (FP8AUDIT_PROBE, `fp8audit run --probe`), and when. The
// probes and modes, their names and parsers are fp8audit/vocabulary.h's (Probe, ProbeMode,
// ProbeModeUses); the rules are here.
//
//   te-call      the preloaded libfp8audit.so defines Transformer Engine's DelayedScaling update
//                entry points (te_probe.h); every call is one update, then TE's own function runs
//   python-hook  fp8audit's Python hook (FP8AUDIT_PYHOOK=te-count) brackets
//                reduce_and_update_fp8_tensors with an NVTX range (hook_probe.h)
//   kernel       CUPTI launch callbacks, classified by kernel name (kernel_probe.h)
//
// Modes: `te-call` never subscribes to CUPTI; `kernel` records no TE call (the Python hook still
// counts when armed; `fp8audit run` arms it only where ProbeModeUses says); `all` runs every probe.
// `auto` (the default) leaves CUPTI alone in a job whose
// libtransformer_engine is loaded and reached through the preloaded agent, unless kernel patterns
// were given: at CUDA's initialisation (the driver calls the injection) it subscribes only when no
// libtransformer_engine is loaded yet, or patterns were given, or the agent is not preloaded (then
// TE calls cannot be seen). A subscription made because TE was not loaded yet is provisional: when
// TE appears (the writer thread looks every 100 ms; the first TE update call at the latest) and no
// patterns were given, the agent unsubscribes, which leaves CUPTI free for torch.profiler, Nsight
// and other tools from then on, and records a PROBES event. When the agent holds CUPTI it says once
// on stderr that other profilers in the job lose CUDA activity; when another tool holds it, it says
// so and the TE probes count (in `kernel` mode too).
//
// One update seen by several probes is counted once: the outer probe that saw it defers to the
// inner one. A kernel update launched inside a TE call the te-call probe recorded, and a
// Python-hook range inside which a TE call or a counted kernel update was recorded, are
// cross-checks (CROSSCHECK_UPDATE_* events); the hook's updates that TE ran without its C entry
// point (the unfused path) count when nothing inside the range did.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "agent/src/config.h"
#include "agent/src/record_sink.h"

namespace fp8audit::agent {

// What to do with CUPTI when CUDA initialises.
struct CuptiPlan {
  bool subscribe = false;
  bool provisional = false;  // released when TE appears
};
// `te_loaded`: a libtransformer_engine is loaded; `te_interposed`: the preloaded agent defines
// TE's entry points ahead of it; `user_patterns`: kernel patterns were given.
CuptiPlan PlanCuptiAtCudaInit(ProbeMode mode, bool te_loaded, bool te_interposed,
                              bool user_patterns);

// True when one of `paths` (loaded objects) is a libtransformer_engine library.
bool IsTeLibrary(std::string_view path);
// Whether a libtransformer_engine is loaded in this process (dl_iterate_phdr).
bool TeLibraryLoaded();
// True when the symbol TE's extension calls resolves, in the global scope, to the library at
// `self_path` (the preloaded libfp8audit.so): only then can the te-call probe see TE's calls.
bool TeEntryPointsInterposedBy(const std::string& self_path);
// Objects loaded into the process so far (glibc's dlpi_adds): changes when a library is loaded.
uint64_t LoadCount();

class Classifier;

// What the probe control is handed by the agent: where its PROBES events go, whether the trace has
// started (before, the header says which probes are active), and what the kernel probe is handed
// when it subscribes (kernel_probe.h's KernelProbeHost).
struct ProbeHost {
  RecordSink* sink = nullptr;
  std::function<bool()> trace_started;
  const Classifier* classifier = nullptr;
  std::function<void()> first_function;
  std::function<void(const std::string& path, uint32_t api_version)> cupti_opened;
};

// The process's probe state (one instance, Probes()).
class ProbeControl {
 public:
  // From Agent::Init: the mode, whether the agent interposes TE's entry points, the hook, and what
  // the probes record into. Until then nothing subscribes to CUPTI.
  void Init(const Config& config, bool te_interposed, ProbeHost host);
  // The active probes, as ProbeBit bits (ProbeNames names them).
  uint32_t bits() const { return bits_.load(std::memory_order_acquire); }
  ProbeMode mode() const { return mode_; }
  // The te-call probe records calls (its bit is set and benchmarks have not turned it off).
  bool te_call_recording() const {
    return (bits() & ProbeBit(Probe::kTeCall)) != 0 && recording_.load(std::memory_order_relaxed);
  }
  // Benchmarks: TE calls recorded (1) or not (0), as fp8audit_set_launch_probe toggles.
  void SetRecording(bool on) { recording_.store(on, std::memory_order_relaxed); }

  // The driver initialised CUDA (InitializeInjection) or the agent found it loaded: subscribes to
  // CUPTI as the mode and PlanCuptiAtCudaInit say. `from_driver` as for AttachKernelProbe.
  void OnCudaInit(bool from_driver);
  // TE showed itself (`why`): releases a provisional CUPTI subscription.
  void OnTeSeen(const char* why);
  // The writer thread, every cycle: while a provisional subscription is held, looks for TE.
  void Poll();

 private:
  void SetBits(uint32_t bits, const char* why);

  ProbeMode mode_ = ProbeMode::kAuto;
  bool user_patterns_ = false;
  bool te_interposed_ = false;
  std::atomic<uint32_t> bits_{0};
  std::atomic<bool> recording_{true};
  std::atomic<bool> provisional_{false};
  std::atomic<bool> te_seen_{false};
  uint64_t polled_loads_ = 0;  // writer thread only
  ProbeHost host_;
};

ProbeControl& Probes();

}  // namespace fp8audit::agent
