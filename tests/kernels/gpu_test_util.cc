#include "gpu_test_util.h"

#include <stdexcept>

namespace fp8audit::kernels::testing {

bool HasCudaDevice() {
  static const bool has = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the error state
      return false;
    }
    return count > 0;
  }();
  return has;
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

}  // namespace fp8audit::kernels::testing
