// The CUDA driver and CUPTI types the kernel probe and the CUPTI loader use: CUDA's and CUPTI's own
// headers in a build with CUPTI (FP8AUDIT_AGENT_CUPTI=1), else a small stand-in with the same names
// so that the probe, the loader and their CPU tests build everywhere. The stand-in's values are its
// own (a build without CUPTI never subscribes: AttachKernelProbe says so and steps aside).
#pragma once

#if FP8AUDIT_AGENT_CUPTI

#include <cuda.h>
#include <cupti.h>  // also the driver functions' parameter structs

#else

#include <cstddef>
#include <cstdint>

// ---- CUDA driver ----
using CUresult = int;
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;
using CUdevice = int;
using CUfunction = struct CUfunc_st*;
using CUkernel = struct CUkern_st*;
using CUstream = struct CUstream_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUcontext = struct CUctx_st*;
enum CUgraphNodeType { CU_GRAPH_NODE_TYPE_KERNEL = 0, CU_GRAPH_NODE_TYPE_GRAPH = 5 };
enum CUstreamCaptureStatus {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
};
#define CU_LAUNCH_PARAM_END (reinterpret_cast<void*>(0x00))
#define CU_LAUNCH_PARAM_BUFFER_POINTER (reinterpret_cast<void*>(0x01))
#define CU_LAUNCH_PARAM_BUFFER_SIZE (reinterpret_cast<void*>(0x02))
struct CUDA_KERNEL_NODE_PARAMS_v2 {
  CUfunction func;
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void** kernelParams;
  void** extra;
  CUkernel kern;
  CUcontext ctx;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
};

// The launch entry points' parameter structs (the fields the probe reads).
struct cuLaunchKernel_params {
  CUfunction f;
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  void** kernelParams;
  void** extra;
};
using cuLaunchKernel_ptsz_params = cuLaunchKernel_params;
struct cuLaunchKernelEx_params {
  const CUlaunchConfig* config;
  CUfunction f;
  void** kernelParams;
  void** extra;
};
using cuLaunchKernelEx_ptsz_params = cuLaunchKernelEx_params;
struct cuLaunchCooperativeKernel_params {
  CUfunction f;
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  void** kernelParams;
};
using cuLaunchCooperativeKernel_ptsz_params = cuLaunchCooperativeKernel_params;
struct cuGraphLaunch_params {
  CUgraphExec hGraph;
  CUstream hStream;
};
struct cuGraphLaunch_ptsz_params {
  CUgraphExec hGraphExec;
  CUstream hStream;
};
struct cuStreamBeginCapture_v2_params {
  CUstream hStream;
  int mode;
};
struct cuStreamEndCapture_params {
  CUstream hStream;
  CUgraph* phGraph;
};

// ---- CUPTI ----
#define CUPTIAPI
using CUptiResult = int;
inline constexpr CUptiResult CUPTI_SUCCESS = 0;
inline constexpr CUptiResult CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39;
using CUpti_CallbackId = uint32_t;
enum CUpti_CallbackDomain { CUPTI_CB_DOMAIN_DRIVER_API = 1, CUPTI_CB_DOMAIN_RESOURCE = 3 };
enum CUpti_ApiCallbackSite { CUPTI_API_ENTER = 0, CUPTI_API_EXIT = 1 };
using CUpti_SubscriberHandle = struct CUpti_Subscriber_st*;
using CUpti_CallbackFunc = void(CUPTIAPI*)(void*, CUpti_CallbackDomain, CUpti_CallbackId,
                                           const void*);
struct CUpti_CallbackData {
  CUpti_ApiCallbackSite callbackSite;
  const char* functionName;
  const void* functionParams;
  void* functionReturnValue;
  const char* symbolName;
};
struct CUpti_ResourceData {
  CUcontext context;
  void* resourceHandle;
  void* resourceDescriptor;
};
struct CUpti_GraphData {
  CUgraph graph;
  CUgraphExec graphExec;
};
enum : CUpti_CallbackId {
  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel = 1,
  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
  CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
  CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
  CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
  CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};
enum : CUpti_CallbackId {
  CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING = 5,
  CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED = 20,
  CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING = 21,
};

#endif  // FP8AUDIT_AGENT_CUPTI
