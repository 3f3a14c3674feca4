// A CUDA injection library that subscribes to CUPTI's four driver launch callbacks and only counts:
// the cost any CUPTI launch probe pays, to set the agent's own cost against (run_bench.py).
#include <cupti.h>

#include <atomic>
#include <initializer_list>

namespace {
std::atomic<unsigned long long> g_launches{0};

void CUPTIAPI Count(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_EXIT) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
  }
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  CUpti_SubscriberHandle subscriber = nullptr;
  if (cuptiSubscribe(&subscriber, &Count, nullptr) != CUPTI_SUCCESS) return 1;
  for (CUpti_CallbackId id :
       {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz}) {
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  return 1;
}
