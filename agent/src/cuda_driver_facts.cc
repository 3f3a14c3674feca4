#include "agent/src/cuda_driver_facts.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace fp8audit::agent {

std::string ParseNvidiaDriverRelease(std::string_view text) {
  // "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ..."
  const size_t at = text.find("Kernel Module");
  if (at == std::string_view::npos) return {};
  text.remove_prefix(at);
  const size_t eol = text.find('\n');
  text = text.substr(0, eol);
  while (!text.empty()) {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const size_t end = std::min(text.find_first_of(" \t"), text.size());
    const std::string_view token = text.substr(0, end);
    text.remove_prefix(end);
    const bool version = token.size() <= 32 && token.find('.') != std::string_view::npos &&
                         token.find_first_not_of("0123456789.") == std::string_view::npos &&
                         token.front() != '.';
    if (version) return std::string(token);
  }
  return {};
}

bool CudaDriverLoaded() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

namespace {

std::string ReadDriverRelease() {
  const int fd = ::open("/proc/driver/nvidia/version", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[512] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  return n > 0 ? ParseNvidiaDriverRelease(std::string_view(buf, static_cast<size_t>(n))) : "";
}

std::string VersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

CudaDriverFacts CudaDriverFacts::Collect() {
  CudaDriverFacts facts;
  facts.driver = ReadDriverRelease();
  int version = 0;
  using RuntimeVersion = int (*)(int*);
  if (auto fn = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion"));
      fn != nullptr && fn(&version) == 0 && version > 0) {
    facts.cuda = VersionText(version);
  }
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); lib != nullptr) {
    using CtxGetDevice = int (*)(int*);
    using DeviceGetName = int (*)(char*, int, int);
    using DriverGetVersion = int (*)(int*);
    auto ctx_get_device = reinterpret_cast<CtxGetDevice>(dlsym(lib, "cuCtxGetDevice"));
    auto device_get_name = reinterpret_cast<DeviceGetName>(dlsym(lib, "cuDeviceGetName"));
    auto driver_get_version = reinterpret_cast<DriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
    int dev = 0;
    char name[256] = {};
    if (ctx_get_device != nullptr && device_get_name != nullptr && ctx_get_device(&dev) == 0 &&
        device_get_name(name, sizeof(name) - 1, dev) == 0) {
      facts.gpu = name;
    }
    if (driver_get_version != nullptr && driver_get_version(&version) == 0) {
      const std::string api = "CUDA " + VersionText(version);
      facts.driver = facts.driver.empty() ? api : facts.driver + " (" + api + ")";
    }
    dlclose(lib);
  }
  return facts;
}

}  // namespace fp8audit::agent
