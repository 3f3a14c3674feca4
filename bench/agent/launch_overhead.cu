// Host time per kernel launch: an empty kernel launched in batches; prints the median, 10th and
// 90th percentile of the per-launch time over batches. Run it with and without the agent
// (bench/agent/run_bench.py does, side by side). Under a tool that exports
// fp8audit_set_launch_probe (the agent, the counting-only subscriber), batches alternate between
// the probe on and off in this one process, and the medians of both halves are printed too.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel() {}

namespace {

using Toggle = int (*)(int);

// The loaded tool's toggle: LD_PRELOAD-ed libraries are global; a CUDA injection library is not.
Toggle FindToggle() {
  if (auto t = reinterpret_cast<Toggle>(dlsym(RTLD_DEFAULT, "fp8audit_set_launch_probe"))) return t;
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  if (path == nullptr || *path == '\0') return nullptr;
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  return h != nullptr ? reinterpret_cast<Toggle>(dlsym(h, "fp8audit_set_launch_probe")) : nullptr;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 300;
  const int per_batch = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (cudaFree(nullptr) != cudaSuccess) return 77;
  for (int i = 0; i < 5000; ++i) empty_kernel<<<1, 1>>>();
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  const Toggle toggle = FindToggle();
  const bool alternate = toggle != nullptr && toggle(1) == 0;
  std::vector<double> ns, on_ns, off_ns;
  for (int b = 0; b < batches; ++b) {
    const bool on = !alternate || b % 2 == 0;
    if (alternate) toggle(on ? 1 : 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) empty_kernel<<<1, 1>>>();
    const auto t1 = std::chrono::steady_clock::now();
    const double per_launch = std::chrono::duration<double, std::nano>(t1 - t0).count() / per_batch;
    (on ? on_ns : off_ns).push_back(per_launch);
    if (on) ns.push_back(per_launch);
    cudaDeviceSynchronize();
  }
  if (alternate) toggle(1);
  std::sort(ns.begin(), ns.end());
  std::printf("{\"median_ns\": %.1f, \"p10_ns\": %.1f, \"p90_ns\": %.1f, \"launches\": %d",
              ns[ns.size() / 2], ns[ns.size() / 10], ns[ns.size() * 9 / 10],
              batches * per_batch + 5000);
  if (alternate) {
    std::printf(", \"probe_on_median_ns\": %.1f, \"probe_off_median_ns\": %.1f", Median(on_ns),
                Median(off_ns));
  }
  std::printf("}\n");
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
