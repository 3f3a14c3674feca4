#include "agent/src/cupti_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "agent/src/cupti_search.h"

namespace fp8audit::agent {
namespace {

template <typename Fn>
void Sym(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
}

int CollectLoaded(dl_phdr_info* info, size_t, void* data) {
  auto* loaded = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' && loaded->size() < 4096) {
    loaded->emplace_back(info->dlpi_name);
  }
  return 0;
}

}  // namespace

bool CuptiLoader::Load(const Libraries& libraries, bool from_driver, std::string* why) {
  const char* driver = libraries.driver.c_str();
  void* cuda = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr && from_driver) cuda = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    const char* e = dlerror();
    *why = std::string("no CUDA driver (") + (e != nullptr ? e : driver) + ")";
    return false;
  }
  DriverApi& cu = driver_;
  Sym(cuda, "cuFuncGetName", &cu.func_get_name);
  Sym(cuda, "cuFuncGetParamInfo", &cu.func_get_param_info);
  Sym(cuda, "cuKernelGetName", &cu.kernel_get_name);
  Sym(cuda, "cuKernelGetParamInfo", &cu.kernel_get_param_info);
  Sym(cuda, "cuGraphGetNodes", &cu.graph_get_nodes);
  Sym(cuda, "cuGraphNodeGetType", &cu.node_get_type);
  Sym(cuda, "cuGraphKernelNodeGetParams_v2", &cu.kernel_node_get_params);
  Sym(cuda, "cuGraphChildGraphNodeGetGraph", &cu.child_graph);
  Sym(cuda, "cuDriverGetVersion", &cu.driver_get_version);
  Sym(cuda, "cuCtxGetDevice", &cu.ctx_get_device);
  Sym(cuda, "cuDeviceGetName", &cu.device_get_name);
  Sym(cuda, "cuStreamIsCapturing", &cu.stream_is_capturing);

  std::string tried;
  void* lib = OpenCupti(libraries, &tried);
  if (lib == nullptr) {
    *why = "no CUPTI could be loaded (" + tried + ")";
    return false;
  }
  CuptiApi& c = cupti_;
  Sym(lib, "cuptiSubscribe", &c.subscribe);
  Sym(lib, "cuptiUnsubscribe", &c.unsubscribe);
  Sym(lib, "cuptiEnableCallback", &c.enable_callback);
  Sym(lib, "cuptiGetResultString", &c.result_string);
  Sym(lib, "cuptiGetVersion", &c.get_version);
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  Sym(lib, "cuptiSubscribe_v2", &c.subscribe_v2);
#endif
  if (c.get_version == nullptr || c.get_version(&api_version_) != CUPTI_SUCCESS) api_version_ = 0;
  if (c.subscribe == nullptr || c.enable_callback == nullptr) {
    *why = "this CUPTI lacks cuptiSubscribe or cuptiEnableCallback";
    return false;
  }
  return true;
}

// Opens the CUPTI of the job's CUDA major version (cupti_search.h), or the first of the given
// ones; `tried`: what was tried, for the line saying why none could be opened.
void* CuptiLoader::OpenCupti(const Libraries& libraries, std::string* tried) {
  CuptiQuery q;
  dl_iterate_phdr(&CollectLoaded, &q.loaded);
  using RuntimeVersion = int (*)(int*);
  if (auto fn = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion"));
      fn != nullptr && fn(&q.runtime_version) != 0) {
    q.runtime_version = 0;
  }
  if (driver_.driver_get_version == nullptr || driver_.driver_get_version(&q.driver_version) != 0) {
    q.driver_version = 0;
  }
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0' && q.cuda_home.empty()) {
      q.cuda_home = v;
    }
  }
  const SystemFileView fs;
  const int major = CudaMajor(q, fs);
  const std::vector<std::string> candidates =
      libraries.cupti.empty() ? CuptiCandidates(q, fs) : libraries.cupti;
  std::string first_error;
  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      if (first_error.empty() && e != nullptr) first_error = e;
      continue;
    }
    link_map* map = nullptr;
    const std::string where =
        dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr
            ? std::string(map->l_name)
            : name;
    const std::string real = fs.RealPath(where);
    cupti_path_ = real.empty() ? where : real;
    return h;
  }
  *tried = (major > 0 ? "for CUDA " + std::to_string(major) : std::string("for an unknown CUDA")) +
           ", tried " + std::to_string(candidates.size()) + ": " +
           (candidates.empty() ? std::string("nothing") : candidates.front()) +
           (candidates.size() > 1 ? " ... " + candidates.back() : std::string()) +
           (first_error.empty() ? std::string() : "; " + first_error);
  return nullptr;
}

std::string CuptiLoader::ResultText(CUptiResult r) const {
  const char* s = nullptr;
  if (cupti_.result_string != nullptr) cupti_.result_string(r, &s);
  return std::string(s != nullptr ? s : "error ") + (s != nullptr ? "" : std::to_string(r));
}

}  // namespace fp8audit::agent
