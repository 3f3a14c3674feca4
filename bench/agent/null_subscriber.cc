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

// Enables (1) or disables (0) this subscriber's callbacks: the launch callbacks, and with the
// agent's set also its other driver and resource callbacks.
int Enable(uint32_t on) {
  int failed = 0;
  if (g_agent_set) {
    for (CUpti_CallbackId id : fp8audit::agent::kOtherDriverCallbacks) {
      failed |=
          cuptiEnableCallback(on, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) != CUPTI_SUCCESS;
    }
    for (CUpti_CallbackId id : fp8audit::agent::kResourceCallbacks) {
      failed |=
          cuptiEnableCallback(on, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, id) != CUPTI_SUCCESS;
    }
  }
  for (size_t i = 0; i < std::size(fp8audit::agent::kLaunchCallbacks); ++i) {
    if (g_agent_set || i < 4) {
      failed |= cuptiEnableCallback(on, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                    fp8audit::agent::kLaunchCallbacks[i]) != CUPTI_SUCCESS;
    }
  }
  return failed != 0 ? -1 : 0;
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
