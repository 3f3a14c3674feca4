// Launches kernels named and shaped like Transformer Engine's DelayedScaling update kernels in
// known patterns, on a training thread and on a thread named like PyTorch's autograd thread, so
// that a test can compare the agent's trace with exact expected counts.
//
// usage: agent_launch_patterns hybrid|e4m3|chunked|probe-off|te-appears [pause_ms]
// (exit 77: no GPU). Prints "launches=N" (kernels launched, graph nodes included, none while the
// probe is off) and "done". te-appears: an E4M3 microbatch, then loads the library named by
// FP8AUDIT_TEST_FAKE_TE (a libtransformer_engine.so) RTLD_GLOBAL, waits 500 ms and launches another
// microbatch; prints "before_te=N" too (the launches before the load).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

void LaunchPerThreadStream(float* buffer);  // launch_ptsz.cu: per-thread default stream
void LaunchCooperativePerThread(float* buffer);

namespace transformer_engine {
namespace delayed_scaling_recipe {
namespace {

enum class AmaxComputeAlgo { INVALID, MOST_RECENT, MAX };
struct AmaxParam {
  int num_scale = 0;
  float* amax_history = nullptr;
  float* scale = nullptr;
};
struct AmaxParams {
  AmaxParam param[4];
};

namespace amax_and_scale_update_impl {

__global__ void kernel(const float* amax_history_ptr, const float* scale_ptr,
                       float* updated_amax_history_ptr, float* updated_scale_ptr,
                       size_t amax_history_length, size_t amax_history_stride,
                       AmaxComputeAlgo amax_compute_algo, float scaled_max) {
  if (threadIdx.x == 0 && blockIdx.x == 0) updated_scale_ptr[0] = scaled_max;
}

__global__ void kernel_bulk(float* amax_reduction_buffer, AmaxParams p, size_t amax_history_length,
                            AmaxComputeAlgo amax_compute_algo, float scaled_max) {
  if (threadIdx.x == 0 && blockIdx.x == 0) amax_reduction_buffer[0] = scaled_max;
}

}  // namespace amax_and_scale_update_impl
}  // namespace
}  // namespace delayed_scaling_recipe
}  // namespace transformer_engine

namespace {

namespace te = transformer_engine::delayed_scaling_recipe;

__global__ void other_kernel(float* x) {
  if (threadIdx.x == 0 && blockIdx.x == 0) x[1] += 1.0f;
}

float* g_buf = nullptr;
long g_launches = 0;

#define CHECK(call)                                                                    \
  do {                                                                                 \
    const cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

void Other(int n, cudaStream_t s = nullptr) {
  for (int i = 0; i < n; ++i) other_kernel<<<1, 32, 0, s>>>(g_buf);
  CHECK(cudaGetLastError());
  g_launches += n;
}
void Bulk(float scaled_max, cudaStream_t s = nullptr) {
  te::amax_and_scale_update_impl::kernel_bulk<<<1, 32, 0, s>>>(
      g_buf, te::AmaxParams{}, 16, te::AmaxComputeAlgo::MAX, scaled_max);
  CHECK(cudaGetLastError());
  ++g_launches;
}
// One kernel_bulk launch of `tensors` blocks: Transformer Engine launches one block per tensor and
// splits an update of more than 1364 tensors into back-to-back launches of 1364 blocks.
void BulkOf(unsigned tensors, float scaled_max) {
  te::amax_and_scale_update_impl::kernel_bulk<<<tensors, 32>>>(
      g_buf, te::AmaxParams{}, 16, te::AmaxComputeAlgo::MAX, scaled_max);
  CHECK(cudaGetLastError());
  ++g_launches;
}
void Single(float scaled_max) {
  te::amax_and_scale_update_impl::kernel<<<1, 32>>>(g_buf, g_buf, g_buf, g_buf, 16, 1,
                                                    te::AmaxComputeAlgo::MAX, scaled_max);
  CHECK(cudaGetLastError());
  ++g_launches;
}

// A driver function through the runtime (the program does not link libcuda, so that it starts,
// and says "no GPU", where there is no driver).
template <typename Fn>
Fn Driver(const char* name, unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status));
  if (fn == nullptr || status != cudaDriverEntryPointSuccess) std::exit(1);
  return reinterpret_cast<Fn>(fn);
}

// kernel_bulk through the driver with a packed argument buffer (`extra`), not kernelParams.
void BulkWithExtra(float scaled_max) {
  static const auto param_info =
      Driver<CUresult (*)(CUfunction, size_t, size_t*, size_t*)>("cuFuncGetParamInfo", 12040);
  static const auto launch =
      Driver<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void**, void**)>("cuLaunchKernel", 12000);
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(
      &fn, reinterpret_cast<const void*>(&te::amax_and_scale_update_impl::kernel_bulk)));
  const CUfunction f = reinterpret_cast<CUfunction>(fn);
  size_t offset[5] = {}, size[5] = {};
  for (size_t i = 0; i < 5; ++i) {
    if (param_info(f, i, &offset[i], &size[i]) != CUDA_SUCCESS) std::exit(1);
  }
  alignas(16) unsigned char args[256] = {};
  const te::AmaxParams p{};
  const size_t length = 16;
  const te::AmaxComputeAlgo algo = te::AmaxComputeAlgo::MAX;
  std::memcpy(args + offset[0], &g_buf, size[0]);
  std::memcpy(args + offset[1], &p, size[1]);
  std::memcpy(args + offset[2], &length, size[2]);
  std::memcpy(args + offset[3], &algo, size[3]);
  std::memcpy(args + offset[4], &scaled_max, size[4]);
  size_t total = offset[4] + size[4];
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &total,
                   CU_LAUNCH_PARAM_END};
  if (launch(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra) != CUDA_SUCCESS) {
    std::exit(1);
  }
  ++g_launches;
}

void OtherWithLaunchEx() {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  CHECK(cudaLaunchKernelEx(&config, other_kernel, g_buf));
  ++g_launches;
}

void OtherCooperative() {
  void* args[] = {&g_buf};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&other_kernel), dim3(1), dim3(32),
                                    args, 0, nullptr));
  ++g_launches;
}

template <typename F>
void OnAutogradThread(F body) {
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    body();
    CHECK(cudaDeviceSynchronize());
  });
  t.join();
}

int g_pause_ms = 0;
void EndMicrobatch() {
  CHECK(cudaDeviceSynchronize());
  if (g_pause_ms > 0) usleep(static_cast<useconds_t>(g_pause_ms) * 1000);
}

void Hybrid() {
  // Microbatch 0 (the seed's bug): the recompute's forward update and a second backward update
  // run on the autograd thread; the recompute's comes before any E5M2 update.  2 / 2.
  Other(5);
  Bulk(448.0f);
  OnAutogradThread([] {
    Other(3);
    Bulk(448.0f);
    Other(2);
    Bulk(57344.0f);
    Bulk(57344.0f);
  });
  EndMicrobatch();
  // Microbatch 1: one each.  1 / 1.
  Other(5);
  Bulk(448.0f);
  OnAutogradThread([] {
    Other(4);
    Bulk(57344.0f);
  });
  EndMicrobatch();
  // Microbatch 2: the non-bulk kernel with margins 2 (E4M3) and 1 (E5M2).  1 / 1.
  Other(2);
  Single(448.0f / 4);
  OnAutogradThread([] { Single(57344.0f / 2); });
  EndMicrobatch();
  // Microbatch 3: other launch entry points; a packed-buffer launch; a value that names no
  // format (the pass decides).  1 / 1.
  OtherWithLaunchEx();
  OtherCooperative();
  LaunchPerThreadStream(g_buf);
  LaunchCooperativePerThread(g_buf);
  g_launches += 2;
  BulkWithExtra(448.0f);
  OnAutogradThread([] { Bulk(1.0f); });
  EndMicrobatch();
  // A captured graph: 3 other kernels, 2 forward and 1 backward update, launched 4 times.
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const long before = g_launches;
  Other(3, s);
  Bulk(448.0f, s);
  Bulk(448.0f, s);
  Bulk(57344.0f, s);
  g_launches = before;  // captured, not launched
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 4; ++i) {
    CHECK(cudaGraphLaunch(exec, s));
    g_launches += 6;
  }
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
}

void Chunked() {
  // Microbatch 0: a 1,400-tensor forward update (1364 + 36 blocks) and a 3,000-tensor backward
  // update (1364 + 1364 + 272), as Transformer Engine launches them.  1 / 1.
  Other(2);
  BulkOf(1364, 448.0f);
  BulkOf(36, 448.0f);
  OnAutogradThread([] {
    Other(2);
    BulkOf(1364, 57344.0f);
    BulkOf(1364, 57344.0f);
    BulkOf(272, 57344.0f);
  });
  EndMicrobatch();
  // Microbatch 1: another kernel between a full chunk and the next launch, and two launches that
  // are not full chunks: separate updates.  2 / 2.
  Other(2);
  BulkOf(1364, 448.0f);
  Other(1);
  BulkOf(36, 448.0f);
  OnAutogradThread([] {
    BulkOf(100, 57344.0f);
    BulkOf(100, 57344.0f);
  });
  EndMicrobatch();
  // Microbatch 2: the older 169-tensor chunk continues; a different scaled_max after a full chunk
  // starts a new update (a backward then a forward one).  1 + 1 / 1.
  Other(2);
  BulkOf(169, 448.0f);
  BulkOf(5, 448.0f);
  OnAutogradThread([] {
    BulkOf(1364, 57344.0f);
    BulkOf(2, 448.0f);
  });
  EndMicrobatch();
  Other(1);
}

// Both directions use 448: the pass decides, once the backward pass ends.  1 / 1.
void E4M3Microbatch() {
  Other(3);
  Bulk(448.0f);
  OnAutogradThread([] {
    Other(3);
    Bulk(448.0f);
  });
  EndMicrobatch();
}

void E4M3Only() {
  for (int mb = 0; mb < 2; ++mb) E4M3Microbatch();
  Other(1);
}

// The agent's benchmark toggle, fp8audit_set_launch_probe: one E4M3 microbatch with the probe on,
// one with it off (its launches are neither counted nor recorded), one on again.  1 / 1, twice.
int ProbeOff() {
  void* agent = dlopen(std::getenv("CUDA_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  auto toggle = agent == nullptr
                    ? nullptr
                    : reinterpret_cast<int (*)(int)>(dlsym(agent, "fp8audit_set_launch_probe"));
  if (toggle == nullptr) return 2;
  for (int mb = 0; mb < 3; ++mb) {
    if (toggle(mb == 1 ? 0 : 1) != 0) return 2;
    const long before = g_launches;
    E4M3Microbatch();
    if (mb == 1) g_launches = before;
  }
  Other(1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "hybrid";
  g_pause_ms = argc > 2 ? std::atoi(argv[2]) : 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU\n");
    return 77;
  }
  CHECK(cudaMalloc(&g_buf, 1024));
  CHECK(cudaMemset(g_buf, 0, 1024));
  if (mode == "hybrid") {
    Hybrid();
  } else if (mode == "e4m3") {
    E4M3Only();
  } else if (mode == "chunked") {
    Chunked();
  } else if (mode == "probe-off") {
    if (ProbeOff() != 0) return 2;
  } else if (mode == "te-appears") {
    E4M3Microbatch();
    CHECK(cudaDeviceSynchronize());
    const long before = g_launches;
    const char* te = std::getenv("FP8AUDIT_TEST_FAKE_TE");
    if (te == nullptr || dlopen(te, RTLD_NOW | RTLD_GLOBAL) == nullptr) return 2;
    usleep(500 * 1000);  // the agent's writer looks for TE every 100 ms
    E4M3Microbatch();
    std::printf("before_te=%ld\n", before);
  } else {
    return 2;
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(g_buf));
  std::printf("launches=%ld\ndone\n", g_launches);
  return 0;
}
