// Compiled with --default-stream per-thread: its launches reach the driver as the _ptsz entry
// points (cuLaunchKernel_ptsz, cuLaunchCooperativeKernel_ptsz).
#include <cuda_runtime.h>

#include <cstdlib>

namespace {
__global__ void per_thread_stream_kernel(float* x) {
  if (threadIdx.x == 0 && blockIdx.x == 0) x[2] += 1.0f;
}
}  // namespace

void LaunchPerThreadStream(float* buffer) {
  per_thread_stream_kernel<<<1, 32>>>(buffer);
  if (cudaGetLastError() != cudaSuccess) std::exit(1);
}

void LaunchCooperativePerThread(float* buffer) {
  void* args[] = {&buffer};
  if (cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&per_thread_stream_kernel), dim3(1),
                                  dim3(32), args, 0, nullptr) != cudaSuccess) {
    std::exit(1);
  }
}
