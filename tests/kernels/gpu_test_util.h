// Helpers for the GPU tests: device detection (tests skip without a device), error checks and
// an owning device buffer. No CUDA call happens before a test body runs.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8audit::kernels::testing {

// cudaGetDeviceCount succeeds and reports at least one device.
bool HasCudaDevice();

// Throws std::runtime_error (reported by GoogleTest as a failure) unless err is cudaSuccess.
void Check(cudaError_t err, const char* what);

#define FP8AUDIT_SKIP_WITHOUT_GPU()                       \
  do {                                                    \
    if (!::fp8audit::kernels::testing::HasCudaDevice()) { \
      GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
    }                                                     \
  } while (0)

#define FP8AUDIT_CUDA_CHECK(expr) ::fp8audit::kernels::testing::Check((expr), #expr)

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count, size_t extra_bytes = 0) : count_(count) {
    Check(cudaMalloc(&ptr_, count * sizeof(T) + extra_bytes + 1), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return count_; }
  void Upload(const std::vector<T>& host) {
    Check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    Check(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void Fill(uint8_t byte) { Check(cudaMemset(ptr_, byte, count_ * sizeof(T)), "memset"); }

 private:
  void* ptr_ = nullptr;
  size_t count_;
};

// Index of the first differing element, or -1.
template <typename T>
int64_t FirstMismatch(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace fp8audit::kernels::testing
