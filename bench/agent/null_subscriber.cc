// A CUDA injection library that subscribes to CUPTI launch callbacks and only counts: the cost any
// CUPTI launch probe pays, to set the agent's own cost against (run_bench.py).
// FP8AUDIT_NULL_SET=launch (default): the four cuLaunchKernel[Ex][_ptsz] callbacks;
// FP8AUDIT_NULL_SET=agent: exactly the callbacks the agent enables (agent/src/cupti_callbacks.h).
#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "agent/src/cupti_callbacks.h"

namespace {
std::atomic<unsigned long long> g_launches{0};
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_agent_set = false;

// Sets (1) or clears (0) the callbacks `ids` in `domain`; false when CUPTI refused one.
template <size_t N>
bool EnableAll(uint32_t on, CUpti_CallbackDomain domain, const CUpti_CallbackId (&ids)[N],
               size_t count = N) {
  bool ok = true;
  for (size_t i = 0; i < count && i < N; ++i) {
    ok &= cuptiEnableCallback(on, g_subscriber, domain, ids[i]) == CUPTI_SUCCESS;
  }
  return ok;
}

// Enables (1) or disables (0) this subscriber's callbacks: the four plain launch callbacks, or with
// the agent's set all of its launch, graph-launch, capture and resource callbacks.
int Enable(uint32_t on) {
  namespace a = fp8audit::agent;
  constexpr CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
  bool ok = EnableAll(on, kDriver, a::kLaunchCallbacks,
                      g_agent_set ? std::size(a::kLaunchCallbacks) : a::kPlainLaunchCallbacks);
  if (g_agent_set) {
    ok &= EnableAll(on, kDriver, a::kGraphLaunchCallbacks);
    ok &= EnableAll(on, kDriver, a::kCaptureCallbacks);
    ok &= EnableAll(on, CUPTI_CB_DOMAIN_RESOURCE, a::kResourceCallbacks);
  }
  return ok ? 0 : -1;
}

void CUPTIAPI Count(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_EXIT) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
  }
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (cuptiSubscribe(&g_subscriber, &Count, nullptr) != CUPTI_SUCCESS) return 1;
  const char* set = std::getenv("FP8AUDIT_NULL_SET");
  g_agent_set = set != nullptr && std::strcmp(set, "agent") == 0;
  Enable(1);
  return 1;
}

// The agent's benchmark toggle (see agent/src/shim.cc), for the same in-process comparison; with
// FP8AUDIT_NULL_SET=agent it turns every callback of the set off and on.
extern "C" __attribute__((visibility("default"))) int fp8audit_set_launch_probe(int on) {
  return g_subscriber == nullptr ? -1 : Enable(on != 0 ? 1 : 0);
}
