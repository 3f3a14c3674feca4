// libfp8audit_impl.so's entry points, called by libfp8audit.so (shim.cc): fp8audit_agent_start from
// its constructor (every route runs it first), then the routes' own entry points. The agent
// initialises once however many routes reach it:
//   LD_PRELOAD             constructor; points NVTX_INJECTION64_PATH and CUDA_INJECTION64_PATH at
//                          this library when they are unset and the process is single-threaded
//   CUDA_INJECTION64_PATH  the driver calls InitializeInjection at cuInit: attach the kernel probe
//   NVTX_INJECTION64_PATH  each NVTX client calls InitializeInjectionNvtx2 at its first NVTX call
// and, from libfp8audit.so's definitions of Transformer Engine's update entry points, the te-call
// probe's fp8audit_agent_te_begin / fp8audit_agent_te_end around each call (te_probe.h); from its
// definitions of _exit and _Exit, fp8audit_agent_before_exit (Agent::FinishBeforeImmediateExit);
// from its exec family, fp8audit_agent_before_exec and fp8audit_agent_after_failed_exec.
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/src/agent.h"
#include "agent/src/cuda_driver_facts.h"
#include "agent/src/kernel_probe.h"
#include "agent/src/nvtx_probe.h"
#include "agent/src/probe_control.h"
#include "agent/src/self_profile.h"
#include "agent/src/te_probe.h"
#include "agent/src/warn.h"

namespace fp8audit::agent {

// The Python hook marked TE's import (fp8audit.te te=...).
std::atomic<bool> g_hook_saw_te{false};

namespace {

int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

bool IsSelf(const char* path, const std::string& self) {
  if (path == nullptr || *path == '\0' || self.empty()) return false;
  char resolved[PATH_MAX];
  return realpath(path, resolved) != nullptr && self == resolved;
}

// Init() from any route; the first to see FP8AUDIT_SELF_PROFILE=1 turns self-profiling on and
// prints its line at exit.
Agent& Initialized() {
  Agent& a = Agent::Get();
  a.Init();
  static std::atomic<bool> profile_once{false};
  if (a.enabled() && a.config().self_profile && !profile_once.exchange(true)) {
    EnableSelfProfile();
    std::atexit([] { Warn(SelfProfileSummary(NvtxCallsByDomain())); });
  }
  return a;
}

void OnLoad(const char* public_path) {
  Agent::Get().SetSelfPath(public_path);
  Agent& a = Initialized();
  if (!a.enabled()) return;
  const std::string& self = a.self_path();
  // Before main() nothing else reads the environment concurrently; later (dlopen by the driver or
  // by NVTX inside a running program) setenv would race with other threads, so it is skipped.
  if (ThreadCount() == 1 && !self.empty()) {
    setenv("NVTX_INJECTION64_PATH", self.c_str(), 0);
    setenv("CUDA_INJECTION64_PATH", self.c_str(), 0);
  }
  const char* cuda_injection = getenv("CUDA_INJECTION64_PATH");
  if (IsSelf(cuda_injection, self)) return;  // the driver calls InitializeInjection at cuInit
  if (CudaDriverLoaded()) {
    Probes().OnCudaInit(false);  // loaded late (e.g. through NVTX): decide now
  } else if (cuda_injection != nullptr && *cuda_injection != '\0') {
    static std::atomic<bool> once{false};
    WarnOnce(&once, std::string("kernel launches are not recorded: CUDA_INJECTION64_PATH names "
                                "another tool (") +
                        cuda_injection + "); NVTX events still are");
  }
}

// A Python process that calls TE's update entry point while the hook, armed, never marked TE's
// import: the hook did not run here (python -I, -E, a PYTHONPATH of the job's own). Said once, as
// a fact of the trace (PYTHON_HOOK_ABSENT), at the first call.
void NoteHookAbsence() {
  Agent& a = Agent::Get();
  if (!a.config().python_hook_armed || g_hook_saw_te.load(std::memory_order_acquire)) return;
  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") == nullptr) return;  // not a Python process
  ThreadState* ts = a.Self();
  if (ts == nullptr) return;
  RawEvent e;
  e.kind = RawKind::kHookAbsent;
  e.SetText(
      "Transformer Engine's update entry point was called and the Python hook never said "
      "TE was imported");
  a.Record(ts, &e);
}

TeCallProbe& TeProbe() {
  static TeCallProbe* probe = new TeCallProbe(&Agent::Get(), [] {
    CollectCudaFactsOnce();
    Probes().OnTeSeen("Transformer Engine called its update entry point");
    NoteHookAbsence();
  });
  return *probe;
}

}  // namespace
}  // namespace fp8audit::agent

extern "C" __attribute__((visibility("default"))) void fp8audit_agent_start(
    const char* public_path) {
  fp8audit::agent::OnLoad(public_path);
}

extern "C" __attribute__((visibility("default"))) int fp8audit_agent_initialize_injection() {
  auto& a = fp8audit::agent::Initialized();
  if (a.enabled()) fp8audit::agent::Probes().OnCudaInit(true);
  return 1;
}

extern "C" __attribute__((visibility("default"))) int fp8audit_agent_initialize_nvtx(
    const void* (*get_export_table)(uint32_t)) {
  auto& a = fp8audit::agent::Initialized();
  if (!a.enabled()) return 0;  // NVTX then turns every call into a no-op
  fp8audit::agent::NvtxProbeHost host;
  host.config = &a.config();
  host.sink = &a;
  host.te_seen = [](const char* why) { fp8audit::agent::Probes().OnTeSeen(why); };
  host.hook_te = [] { fp8audit::agent::g_hook_saw_te.store(true, std::memory_order_release); };
  host.hook_update = [] { fp8audit::agent::CollectCudaFactsOnce(); };
  return fp8audit::agent::InstallNvtxHandlers(get_export_table, host);
}

// fp8audit_flush (shim.cc): the trace written up to now, synchronously; 1, 0 (no trace yet) or -1.
extern "C" __attribute__((visibility("default"))) int fp8audit_agent_flush(char* path,
                                                                           size_t size) {
  auto& a = fp8audit::agent::Agent::Get();
  if (!a.enabled()) return -1;
  std::string written;
  const int rc = a.Flush(&written);
  if (rc > 0 && path != nullptr && size > 0) {
    const size_t n = written.size() < size - 1 ? written.size() : size - 1;
    written.copy(path, n);
    path[n] = '\0';
  }
  return rc;
}

extern "C" __attribute__((visibility("default"))) int fp8audit_agent_set_launch_probe(int on) {
  namespace a = fp8audit::agent;
  const int launches = a::SetLaunchProbe(on != 0);
  a::Probes().SetRecording(on != 0);
  const bool te_call = (a::Probes().bits() & fp8audit::ProbeBit(fp8audit::Probe::kTeCall)) != 0;
  return launches == 0 || te_call ? 0 : -1;
}

// The te-call probe (shim.cc calls these around each TE update call). Begin returns 1 when the call
// was recorded; only then is End called.
extern "C" __attribute__((visibility("default"))) int fp8audit_agent_te_begin(int entry,
                                                                              int fp8_dtype,
                                                                              uint64_t tensors) {
  namespace a = fp8audit::agent;
  if (!a::Agent::Get().enabled() || !a::Probes().te_call_recording()) return 0;
  return a::TeProbe().Begin(entry, fp8_dtype, tensors) ? 1 : 0;
}

extern "C" __attribute__((visibility("default"))) void fp8audit_agent_before_exit() {
  fp8audit::agent::Agent& a = fp8audit::agent::Agent::Get();
  if (a.enabled()) a.FinishBeforeImmediateExit();
}

// Around an exec (shim.cc): the trace sealed before it, unsealed when it returns (it failed).
extern "C" __attribute__((visibility("default"))) void fp8audit_agent_before_exec() {
  fp8audit::agent::Agent& a = fp8audit::agent::Agent::Get();
  if (a.enabled()) a.BeforeExec();
}

extern "C" __attribute__((visibility("default"))) void fp8audit_agent_after_failed_exec() {
  fp8audit::agent::Agent& a = fp8audit::agent::Agent::Get();
  if (a.enabled()) a.AfterFailedExec();
}

// Before an exec whose new image runs without the agent (shim.cc): the slot of its fact, or -1;
// given back when the exec fails.
extern "C" __attribute__((visibility("default"))) int fp8audit_agent_child_without_agent(
    const char* why, const char* path) {
  return fp8audit::agent::Agent::Get().NoteChildWithoutAgent(why, path);
}

extern "C" __attribute__((visibility("default"))) void fp8audit_agent_child_exec_failed(int slot) {
  fp8audit::agent::Agent::Get().ChildExecFailed(slot);
}

extern "C" __attribute__((visibility("default"))) void fp8audit_agent_te_end() {
  fp8audit::agent::TeProbe().End();
}
