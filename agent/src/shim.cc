// libfp8audit.so: the library every route loads. It depends on nothing but libc and loads the
// implementation, libfp8audit_impl.so from the same directory, with RTLD_LOCAL: the
// implementation's own libraries (libprotobuf) never enter the process's global symbol scope, so
// they cannot interpose on a framework's copies (libtorch exports its protobuf symbols) or the
// other way round. Routes: see entry.cc.
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <initializer_list>

namespace {

using StartFn = void (*)(const char* public_path);
using InjectionFn = int (*)();
using NvtxFn = int (*)(const void* (*)(uint32_t));
using ToggleFn = int (*)(int);

struct Impl {
  bool tried = false;
  StartFn start = nullptr;
  InjectionFn injection = nullptr;
  NvtxFn nvtx = nullptr;
  ToggleFn toggle = nullptr;  // optional
};
Impl g_impl;

void Say(const char* a, const char* b) {
  char line[1024];
  size_t n = 0;
  for (const char* s : {"fp8audit: ", a, b, "; nothing is recorded\n"}) {
    for (; s != nullptr && *s != '\0' && n < sizeof(line) - 1; ++s)
      line[n++] = *s == '\n' ? ' ' : *s;
  }
  if (n > 0 && line[n - 1] != '\n') line[n++] = '\n';
  [[maybe_unused]] ssize_t w = write(STDERR_FILENO, line, n);
}

bool Disabled() {
  const char* v = getenv("FP8AUDIT_DISABLE");
  if (v == nullptr) return false;
  for (const char* t : {"1", "true", "yes", "on"}) {
    if (strcmp(v, t) == 0) return true;
  }
  return false;
}

void Load() {
  if (g_impl.tried) return;  // the constructor runs first, before any entry point
  g_impl.tried = true;
  if (Disabled()) return;
  Dl_info info{};
  char self[PATH_MAX];
  if (dladdr(reinterpret_cast<void*>(&Load), &info) == 0 || info.dli_fname == nullptr ||
      realpath(info.dli_fname, self) == nullptr) {
    Say("cannot locate libfp8audit.so", "");
    return;
  }
  char impl[PATH_MAX + 32];
  strcpy(impl, self);
  char* slash = strrchr(impl, '/');
  strcpy(slash != nullptr ? slash + 1 : impl, "libfp8audit_impl.so");
  void* h = dlopen(impl, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == nullptr) {
    Say("cannot load the agent: ", dlerror());
    return;
  }
  g_impl.start = reinterpret_cast<StartFn>(dlsym(h, "fp8audit_agent_start"));
  g_impl.injection = reinterpret_cast<InjectionFn>(dlsym(h, "fp8audit_agent_initialize_injection"));
  g_impl.nvtx = reinterpret_cast<NvtxFn>(dlsym(h, "fp8audit_agent_initialize_nvtx"));
  g_impl.toggle = reinterpret_cast<ToggleFn>(dlsym(h, "fp8audit_agent_set_launch_probe"));
  if (g_impl.start == nullptr || g_impl.injection == nullptr || g_impl.nvtx == nullptr) {
    g_impl = Impl{true};
    Say("the agent library lacks its entry points: ", impl);
    return;
  }
  g_impl.start(self);
}

}  // namespace

__attribute__((constructor)) static void Fp8auditShimLoad() { Load(); }

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  Load();
  return g_impl.injection != nullptr ? g_impl.injection() : 1;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void* (*get_export_table)(uint32_t)) {
  Load();
  return g_impl.nvtx != nullptr ? g_impl.nvtx(get_export_table) : 0;
}

// For benchmarks: the kernel-launch probe off (0) or on again (1) in a running process, to compare
// steps with and without it side by side. Returns 0, or -1 when no probe is attached.
extern "C" __attribute__((visibility("default"))) int fp8audit_set_launch_probe(int on) {
  return g_impl.toggle != nullptr ? g_impl.toggle(on) : -1;
}
