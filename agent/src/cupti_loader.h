// CuptiLoader: opens the CUDA driver and the CUPTI of the job's CUDA major with dlopen (nothing
// CUDA is linked) and fills the function tables the kernel probe is handed. When either cannot be
// opened it says why in one line and the caller steps aside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/src/cupti_types.h"

namespace fp8audit::agent {

// The driver functions the probe calls (any may be null: that fact is then not known).
struct DriverApi {
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;
  CUresult (*func_get_param_info)(CUfunction, size_t, size_t*, size_t*) = nullptr;
  CUresult (*kernel_get_name)(const char**, CUkernel) = nullptr;
  CUresult (*kernel_get_param_info)(CUkernel, size_t, size_t*, size_t*) = nullptr;
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*kernel_node_get_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;
  CUresult (*child_graph)(CUgraphNode, CUgraph*) = nullptr;
  CUresult (*driver_get_version)(int*) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
};

// The CUPTI functions the subscription calls.
struct CuptiApi {
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

class CuptiLoader {
 public:
  struct Libraries {
    std::string driver = "libcuda.so.1";
    // CUPTI libraries to try in order; empty: those for the job's CUDA major (cupti_search.h).
    std::vector<std::string> cupti;
  };

  // Opens the driver (one already loaded; `from_driver`: the driver is loading the agent, so it
  // may be opened) and then CUPTI, and fills the tables. False, with one line in `why`, when no
  // driver or no CUPTI could be opened or CUPTI lacks cuptiSubscribe or cuptiEnableCallback.
  bool Load(bool from_driver, std::string* why) { return Load(Libraries{}, from_driver, why); }
  bool Load(const Libraries& libraries, bool from_driver, std::string* why);

  const DriverApi& driver() const { return driver_; }
  const CuptiApi& cupti() const { return cupti_; }
  // The CUPTI opened (its real path; "" none) and its API version (0 unknown).
  const std::string& cupti_path() const { return cupti_path_; }
  uint32_t cupti_api_version() const { return api_version_; }
  // CUPTI's name for a result, or "error N".
  std::string ResultText(CUptiResult r) const;

 private:
  void* OpenCupti(const Libraries& libraries, std::string* tried);

  DriverApi driver_;
  CuptiApi cupti_;
  std::string cupti_path_;
  uint32_t api_version_ = 0;
};

}  // namespace fp8audit::agent
