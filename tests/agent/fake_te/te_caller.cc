// Loads the stand-in TE extension the way a Python job loads TE, and runs it:
//   te_caller global DIR MODE   libtransformer_engine.so with RTLD_GLOBAL first (as TE's Python
//                               package does with ctypes), then the extension RTLD_LOCAL (as Python
//                               imports an extension module)
//   te_caller local DIR MODE    the extension alone, RTLD_LOCAL (the core library comes in as its
//                               dependency, outside the global scope)
//   te_caller missing           no TE at all: calls the update entry point found in the global
//                               scope (the preloaded agent's), if any
//   te_caller cuda-after DIR MODE   as global, then calls the preloaded agent's InitializeInjection
//                               as the driver does at cuInit (TE loaded before CUDA initialises)
//   te_caller cuda-before DIR MODE  InitializeInjection first, then as global (TE loads later)
// MODE is fake_ext_run's. Exit 0 when every check passed.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "missing") == 0) {
    using Fn =
        void (*)(void*, std::vector<void*>, std::vector<void*>, const char*, int, float, void*);
    auto fn = reinterpret_cast<Fn>(
        dlsym(RTLD_DEFAULT, "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction"));
    if (fn == nullptr) {
      std::printf("no-symbol\n");
      return 0;
    }
    fn(nullptr, std::vector<void*>(3), std::vector<void*>(3), "max", 7, 0.0f, nullptr);
    fn(nullptr, std::vector<void*>(3), std::vector<void*>(3), "max", 7, 0.0f, nullptr);
    std::printf("returned\n");
    return 0;
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: te_caller global|local DIR MODE | te_caller missing\n");
    return 2;
  }
  const std::string dir = argv[2];
  const std::string how = argv[1];
  auto inject = [] {
    auto fn = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "InitializeInjection"));
    if (fn != nullptr) fn();
  };
  if (how == "cuda-before") inject();
  if ((how == "global" || how == "cuda-before" || how == "cuda-after") &&
      dlopen((dir + "/libtransformer_engine.so").c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  void* ext = dlopen((dir + "/libagent_fake_te_ext.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (ext == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  if (how == "cuda-after") inject();
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(ext, "fake_ext_run"));
  return run != nullptr && run(argv[3]) == 0 ? 0 : 1;
}
