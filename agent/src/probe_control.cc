#include "agent/src/probe_control.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>

#include <cstddef>
#include <cstring>

#include "agent/src/kernel_probe.h"
#include "agent/src/warn.h"

namespace fp8audit::agent {

namespace {

constexpr uint32_t kTeCallBit = ProbeBit(Probe::kTeCall);
constexpr uint32_t kKernelBit = ProbeBit(Probe::kKernel);
constexpr uint32_t kHookBit = ProbeBit(Probe::kPythonHook);

}  // namespace

CuptiPlan PlanCuptiAtCudaInit(ProbeMode mode, bool te_loaded, bool te_interposed,
                              bool user_patterns) {
  if (!ProbeModeUses(mode, Probe::kKernel)) return {false, false};
  if (mode != ProbeMode::kAuto) return {true, false};
  if (user_patterns || !te_interposed) return {true, false};
  if (te_loaded) return {false, false};
  return {true, true};
}

bool IsTeLibrary(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base.rfind("libtransformer_engine", 0) == 0 && base.find(".so") != std::string_view::npos;
}

namespace {

int FindTe(dl_phdr_info* info, size_t, void* found) {
  if (info->dlpi_name != nullptr && IsTeLibrary(info->dlpi_name)) {
    *static_cast<bool*>(found) = true;
    return 1;
  }
  return 0;
}

int ReadAdds(dl_phdr_info* info, size_t size, void* out) {
  if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) {
    *static_cast<uint64_t*>(out) = info->dlpi_adds;
  }
  return 1;  // the first object carries the counter
}

}  // namespace

bool TeEntryPointsInterposedBy(const std::string& self_path) {
  void* p =
      dlsym(RTLD_DEFAULT, "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction");
  Dl_info info{};
  if (p == nullptr || self_path.empty() || dladdr(p, &info) == 0 || info.dli_fname == nullptr) {
    return false;
  }
  char resolved[PATH_MAX];
  return ::realpath(info.dli_fname, resolved) != nullptr && self_path == resolved;
}

bool TeLibraryLoaded() {
  bool found = false;
  dl_iterate_phdr(&FindTe, &found);
  return found;
}

uint64_t LoadCount() {
  uint64_t adds = 0;
  dl_iterate_phdr(&ReadAdds, &adds);
  return adds;
}

ProbeControl& Probes() {
  static ProbeControl* control = new ProbeControl();
  return *control;
}

void ProbeControl::Init(const Config& config, bool te_interposed, ProbeHost host) {
  host_ = std::move(host);
  mode_ = config.probe;
  user_patterns_ = !config.patterns_path.empty();
  te_interposed_ = te_interposed;
  uint32_t bits = 0;
  if (ProbeModeUses(mode_, Probe::kTeCall) && te_interposed) bits |= kTeCallBit;
  if (config.python_hook) bits |= kHookBit;
  bits_.store(bits, std::memory_order_release);
}

void ProbeControl::SetBits(uint32_t bits, const char* why) {
  const uint32_t before = bits_.exchange(bits, std::memory_order_acq_rel);
  if (before == bits || why == nullptr) return;
  if (host_.sink == nullptr || !host_.trace_started())
    return;  // the header, written later, says it
  ThreadState* ts = host_.sink->Self();
  if (ts == nullptr) return;
  RawEvent e;
  e.kind = RawKind::kProbes;
  e.count = bits;
  e.SetText(why);
  host_.sink->Record(ts, &e);
}

void ProbeControl::OnCudaInit(bool from_driver) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return;
  const bool te = TeLibraryLoaded();
  if (te) te_seen_.store(true);
  const CuptiPlan plan = PlanCuptiAtCudaInit(mode_, te, te_interposed_, user_patterns_);
  if (!plan.subscribe) return;
  std::string why = "already attempted";
  KernelProbeHost host;
  host.sink = host_.sink;
  host.classifier = host_.classifier;
  host.first_function = host_.first_function;
  host.cupti_opened = host_.cupti_opened;
  const AttachResult r = host_.sink != nullptr ? AttachKernelProbe(host, from_driver, &why)
                                               : AttachResult::kUnavailable;
  if (r == AttachResult::kAttached) {
    provisional_.store(plan.provisional, std::memory_order_release);
    polled_loads_ = 0;
    SetBits(bits() | kKernelBit, "CUPTI subscribed");
    Warn(std::string("the agent holds CUPTI for its kernel-launch probe (--probe ") +
         std::string(ProbeModeName(mode_)) +
         "): torch.profiler, Nsight Systems and other CUPTI tools in this job lose CUDA "
         "activity" +
         (plan.provisional ? " until Transformer Engine loads (--probe te-call leaves CUPTI "
                             "alone)"
                           : ""));
    if (plan.provisional && TeLibraryLoaded()) OnTeSeen("Transformer Engine is loaded");
    return;
  }
  // Not attached: the TE probes count (in `kernel` mode too, when the agent interposes TE).
  const bool te_fallback = te_interposed_ && mode_ != ProbeMode::kTeCall;
  if (te_fallback) SetBits(bits() | kTeCallBit, "CUPTI unavailable");
  const std::string then = te_fallback
                               ? "; Transformer Engine's update calls and NVTX events still are"
                               : "; NVTX events still are";
  if (r == AttachResult::kHeld) {
    Warn("kernel launches are not recorded: another tool holds CUPTI (" + why + ")" + then);
  } else {
    Warn("kernel launches are not recorded: " + why + then);
  }
}

void ProbeControl::OnTeSeen(const char* why) {
  te_seen_.store(true, std::memory_order_release);
  if (!provisional_.exchange(false, std::memory_order_acq_rel)) return;
  if (DetachKernelProbe()) {
    SetBits(
        bits() & ~kKernelBit,
        (std::string("CUPTI released: ") + why + " and counts through its update calls").c_str());
  }
}

void ProbeControl::Poll() {
  if (!provisional_.load(std::memory_order_acquire)) return;
  const uint64_t loads = LoadCount();
  if (loads == polled_loads_) return;
  polled_loads_ = loads;
  if (TeLibraryLoaded()) OnTeSeen("Transformer Engine is loaded");
}

}  // namespace fp8audit::agent
