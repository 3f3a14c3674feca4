// Kernel-launch probe: CUPTI callbacks on the driver's launch entry points (cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel, their _ptsz forms, cuGraphLaunch[_ptsz]) and on
// graph-exec creation. CUPTI and the driver are opened with dlopen; nothing CUDA is linked.
#pragma once

#include <string>
#include <string_view>

namespace fp8audit::agent {

// Subscribes once. `from_driver`: called from InitializeInjection (the driver is loading us).
// When launches cannot be recorded (no driver, no CUPTI, another subscriber) prints one line and
// leaves the NVTX path working.
void AttachKernelProbe(bool from_driver);

// Turns the launch callbacks (kernel and graph launches) off or on for benchmarks that compare
// steps with and without the probe in one process. Launches while it is off are not recorded or
// counted. Returns 0, or -1 when no probe is attached.
int SetLaunchProbe(bool on);

// True when libcuda is already loaded into the process.
bool CudaDriverLoaded();

// The driver release ("580.159.04") in the text of /proc/driver/nvidia/version, or "".
std::string ParseNvidiaDriverRelease(std::string_view text);

}  // namespace fp8audit::agent
