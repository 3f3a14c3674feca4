// Host time per kernel launch: an empty kernel launched in batches; prints the median, 10th and
// 90th percentile of the per-launch time over batches. Run it with and without the agent
// (bench/agent/run_bench.py does, side by side).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 300;
  const int per_batch = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (cudaFree(nullptr) != cudaSuccess) return 77;
  for (int i = 0; i < 5000; ++i) empty_kernel<<<1, 1>>>();
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  std::vector<double> ns;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) empty_kernel<<<1, 1>>>();
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / per_batch);
    cudaDeviceSynchronize();
  }
  std::sort(ns.begin(), ns.end());
  std::printf("{\"median_ns\": %.1f, \"p10_ns\": %.1f, \"p90_ns\": %.1f, \"launches\": %d}\n",
              ns[ns.size() / 2], ns[ns.size() / 10], ns[ns.size() * 9 / 10],
              batches * per_batch + 5000);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
