// CudaDriverFacts: what the trace header says about the GPU and CUDA (the GPU name, the driver
// release and CUDA versions), asked of the driver already loaded into the process; nothing CUDA is
// linked. The agent stores them (CollectCudaFactsOnce, agent.h).
#pragma once

#include <string>
#include <string_view>

namespace fp8audit::agent {

class CudaDriverFacts {
 public:
  // Asks /proc/driver/nvidia/version, the loaded libcuda (its current device) and the loaded CUDA
  // runtime; a fact nobody can give stays "".
  static CudaDriverFacts Collect();

  std::string gpu;     // "NVIDIA H200"
  std::string driver;  // "580.159.04 (CUDA 13.0)"
  std::string cuda;    // the CUDA runtime's version, "13.0"
};

// True when libcuda is already loaded into the process.
bool CudaDriverLoaded();

// The driver release ("580.159.04") in the text of /proc/driver/nvidia/version, or "".
std::string ParseNvidiaDriverRelease(std::string_view text);

}  // namespace fp8audit::agent
