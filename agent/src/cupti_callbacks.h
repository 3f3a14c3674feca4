// The CUPTI callbacks the kernel probe enables (also enabled by the benchmark's counting-only
// subscriber, bench/agent/null_subscriber.cc, to measure what this set costs CUPTI alone).
#pragma once

#include <cstddef>

#include "agent/src/cupti_types.h"

namespace fp8audit::agent {

// Kernel launch entry points of the driver API: cuLaunchKernel first (the probe requires it), then
// its _ptsz and Ex forms (the first kPlainLaunchCallbacks), then the cooperative ones.
inline constexpr size_t kPlainLaunchCallbacks = 4;
inline constexpr CUpti_CallbackId kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

// Graph launches.
inline constexpr CUpti_CallbackId kGraphLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

// The stream-capture bookkeeping.
inline constexpr CUpti_CallbackId kCaptureCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};

// Graph instantiation and destruction, module unloads.
inline constexpr CUpti_CallbackId kResourceCallbacks[] = {
    CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,
    CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING,
    CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
};

inline constexpr bool IsLaunchCallback(CUpti_CallbackId cbid) {
  for (CUpti_CallbackId id : kLaunchCallbacks) {
    if (id == cbid) return true;
  }
  return false;
}

}  // namespace fp8audit::agent
