// libfp8audit.so: the library every route loads. It depends on nothing but libc and loads the
// implementation, libfp8audit_impl.so from the same directory, with RTLD_LOCAL: the
// implementation's own libraries (libprotobuf) never enter the process's global symbol scope, so
// they cannot interpose on a framework's copies (libtorch exports its protobuf symbols) or the
// other way round. Routes: see entry.cc.
//
// It also defines Transformer Engine's DelayedScaling update entry points (the te-call probe,
// agent/src/te_probe.h). Preloaded, it comes before libtransformer_engine.so in the global scope,
// so TE's PyTorch extension calls these; each one tells the implementation (when it is loaded and
// the probe is on) and calls TE's own function with the same arguments. TE's own function is the
// next definition after this library (dlsym RTLD_NEXT: libtransformer_engine.so loaded
// RTLD_GLOBAL, as TE's Python package loads it), else the one in a loaded libtransformer_engine*.so
// (dlopen RTLD_NOLOAD of that object: loaded without RTLD_GLOBAL). Where neither exists, a call
// says so once on stderr and returns without doing anything (never a call through a null
// pointer). A job without TE never calls them: defining them is harmless.
//
// nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction takes two std::vector
// arguments by value. Under the Itanium C++ ABI (x86-64 psABI, AArch64 alike) a class that is not
// trivially copyable or destructible is passed by invisible reference: the caller builds a
// temporary, passes its address where the argument goes, and destroys it after the call. The
// definitions here take those addresses as opaque pointers and hand the same pointers on, so no
// vector is built, copied or destroyed here; the tensor count is (end - begin) / sizeof(void*)
// from the first two pointers of the object (libstdc++ and libc++ lay a vector out as begin, end,
// capacity). tests/agent/fake_te checks this against a library compiled with the real signature.
//
// Preloaded, it also defines `_exit` and `_Exit` (see "Leaving through _exit" below), the exec
// family (see "Replacing the image" below), and sigaction and signal (shim_signals.h: the fatal
// signals the agent catches stay the job's own as far as the job can tell).
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

#include "agent/src/shim_children.h"
#include "agent/src/shim_signals.h"

namespace {

using StartFn = void (*)(const char* public_path);
using InjectionFn = int (*)();
using NvtxFn = int (*)(const void* (*)(uint32_t));
using ToggleFn = int (*)(int);
using TeBeginFn = int (*)(int, int, uint64_t);
using TeEndFn = void (*)();
using BeforeExitFn = void (*)();
using ExitFn = void (*)(int);
using FlushFn = int (*)(char*, size_t);
using ExecHookFn = void (*)();
using ChildFn = int (*)(const char* why, const char* path);
using ChildFailedFn = void (*)(int slot);

struct Impl {
  bool tried = false;
  StartFn start = nullptr;
  InjectionFn injection = nullptr;
  NvtxFn nvtx = nullptr;
  ToggleFn toggle = nullptr;     // optional
  TeBeginFn te_begin = nullptr;  // optional (an older implementation lacks the te-call probe)
  TeEndFn te_end = nullptr;
  BeforeExitFn before_exit = nullptr;  // optional (an older implementation lacks it)
  FlushFn flush = nullptr;             // optional
  ExecHookFn before_exec = nullptr;    // optional
  ExecHookFn after_failed_exec = nullptr;
  ChildFn child_without_agent = nullptr;  // optional, with child_exec_failed
  ChildFailedFn child_exec_failed = nullptr;
};
Impl g_impl;
char g_self_name[NAME_MAX + 1];  // this library's file name, for shim_children.h

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

bool Disabled() { return fp8audit::agent::DisableValue(getenv("FP8AUDIT_DISABLE")); }

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
  g_impl.te_begin = reinterpret_cast<TeBeginFn>(dlsym(h, "fp8audit_agent_te_begin"));
  g_impl.te_end = reinterpret_cast<TeEndFn>(dlsym(h, "fp8audit_agent_te_end"));
  g_impl.flush = reinterpret_cast<FlushFn>(dlsym(h, "fp8audit_agent_flush"));
  if (g_impl.te_begin == nullptr || g_impl.te_end == nullptr) g_impl.te_begin = nullptr;
  g_impl.before_exit = reinterpret_cast<BeforeExitFn>(dlsym(h, "fp8audit_agent_before_exit"));
  g_impl.before_exec = reinterpret_cast<ExecHookFn>(dlsym(h, "fp8audit_agent_before_exec"));
  g_impl.after_failed_exec =
      reinterpret_cast<ExecHookFn>(dlsym(h, "fp8audit_agent_after_failed_exec"));
  if (g_impl.after_failed_exec == nullptr) g_impl.before_exec = nullptr;
  g_impl.child_without_agent =
      reinterpret_cast<ChildFn>(dlsym(h, "fp8audit_agent_child_without_agent"));
  g_impl.child_exec_failed =
      reinterpret_cast<ChildFailedFn>(dlsym(h, "fp8audit_agent_child_exec_failed"));
  if (g_impl.child_exec_failed == nullptr) g_impl.child_without_agent = nullptr;
  const char* base = strrchr(self, '/');
  const char* name = base != nullptr ? base + 1 : self;
  const size_t name_len = strnlen(name, NAME_MAX);
  memcpy(g_self_name, name, name_len);
  g_self_name[name_len] = '\0';
  if (g_impl.start == nullptr || g_impl.injection == nullptr || g_impl.nvtx == nullptr) {
    g_impl = Impl{true};
    Say("the agent library lacks its entry points: ", impl);
    return;
  }
  g_impl.start(self);
  // Fatal signals finish the trace first, invisibly to the job (shim_signals.h).
  fp8audit::agent::ManageFatalSignals(g_impl.before_exit);
}

// ---- Transformer Engine's update entry points --------------------------------------------------

constexpr const char* kTeNames[2] = {
    "nvte_delayed_scaling_recipe_amax_and_scale_update",
    "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction",
};
void* g_te_real[2] = {nullptr, nullptr};  // TE's own functions, once found (atomic access)
bool g_te_missing_said[2] = {false, false};

struct TePath {
  char path[PATH_MAX] = {};
};

int FindTeLibrary(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* slash = strrchr(name, '/');
  const char* base = slash != nullptr ? slash + 1 : name;
  if (strncmp(base, "libtransformer_engine", 21) != 0 || strstr(base, ".so") == nullptr) return 0;
  if (strlen(name) >= PATH_MAX) return 0;
  strcpy(static_cast<TePath*>(data)->path, name);
  return 1;
}

// True when `p` lies in this library (never TE's function, whatever the lookup returned).
bool InThisLibrary(void* p) {
  Dl_info mine{}, theirs{};
  return dladdr(reinterpret_cast<void*>(&Load), &mine) != 0 && dladdr(p, &theirs) != 0 &&
         mine.dli_fbase == theirs.dli_fbase;
}

// TE's own `entry` (see the comment at the top), or null.
void* ResolveTe(int entry) {
  void* real = __atomic_load_n(&g_te_real[entry], __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  real = dlsym(RTLD_NEXT, kTeNames[entry]);
  if (real != nullptr && InThisLibrary(real)) real = nullptr;
  if (real == nullptr) {
    TePath found;
    dl_iterate_phdr(&FindTeLibrary, &found);  // no dlopen while the loader's list is held
    if (found.path[0] != '\0') {
      if (void* h = dlopen(found.path, RTLD_LAZY | RTLD_NOLOAD); h != nullptr) {
        real = dlsym(h, kTeNames[entry]);  // the handle stays open: TE stays loaded anyway
        if (real != nullptr && InThisLibrary(real)) real = nullptr;
      }
    }
  }
  if (real != nullptr) {
    __atomic_store_n(&g_te_real[entry], real, __ATOMIC_RELEASE);
  } else if (!__atomic_exchange_n(&g_te_missing_said[entry], true, __ATOMIC_ACQ_REL)) {
    char line[256] = "fp8audit: ";
    strcat(line, kTeNames[entry]);
    strcat(line,
           " was called but Transformer Engine's own function is not loaded; the call did "
           "nothing\n");
    [[maybe_unused]] ssize_t w = write(STDERR_FILENO, line, strlen(line));
  }
  return real;
}

// Tensors in a std::vector<void*> passed by invisible reference (0 when it does not look like one).
uint64_t VectorSize(const void* vector) {
  if (vector == nullptr) return 0;
  const auto* begin_end = static_cast<const uintptr_t*>(vector);
  const uintptr_t begin = begin_end[0], end = begin_end[1];
  if (end < begin || (end - begin) % sizeof(void*) != 0) return 0;
  const uint64_t n = (end - begin) / sizeof(void*);
  return n <= (1u << 24) ? n : 0;
}

bool TeBegin(int entry, int fp8_dtype, uint64_t tensors) {
  const TeBeginFn begin = g_impl.te_begin;
  return begin != nullptr && begin(entry, fp8_dtype, tensors) != 0;
}

}  // namespace

// NVTEDType is an unscoped enum (int); NVTETensor and cudaStream_t are pointers.
extern "C" __attribute__((visibility("default"))) void
nvte_delayed_scaling_recipe_amax_and_scale_update(const void* amax_history, const void* scale,
                                                  void* updated_amax_history, void* updated_scale,
                                                  const char* amax_compute_algo, int fp8_dtype,
                                                  float margin, void* stream) {
  using Fn = void (*)(const void*, const void*, void*, void*, const char*, int, float, void*);
  const auto real = reinterpret_cast<Fn>(ResolveTe(0));
  if (real == nullptr) return;
  const bool recorded = TeBegin(0, fp8_dtype, 1);
  real(amax_history, scale, updated_amax_history, updated_scale, amax_compute_algo, fp8_dtype,
       margin, stream);
  if (recorded) g_impl.te_end();
}

// The two vectors arrive as the addresses of the caller's temporaries (see the top).
extern "C" __attribute__((visibility("default"))) void
nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction(
    const void* amax_reduction_buffer, void* amax_histories, void* scales,
    const char* amax_compute_algo, int fp8_dtype, float margin, void* stream) {
  using Fn = void (*)(const void*, void*, void*, const char*, int, float, void*);
  const auto real = reinterpret_cast<Fn>(ResolveTe(1));
  if (real == nullptr) return;
  const bool recorded = TeBegin(1, fp8_dtype, VectorSize(amax_histories));
  real(amax_reduction_buffer, amax_histories, scales, amax_compute_algo, fp8_dtype, margin, stream);
  if (recorded) g_impl.te_end();
}

// ---- Leaving through _exit ----------------------------------------------------------------------
//
// exit() runs the implementation's atexit handler (final flush, footer). `_exit` and `_Exit` skip
// it; a forked child leaves through them (Python's os._exit at the end of every multiprocessing
// child and DataLoader worker), so its trace would end without its footer. Preloaded, this library
// comes before libc in the global scope and these definitions are what such a program calls: each
// one lets the implementation finish the trace (fp8audit_agent_before_exit: bounded, no lock, no
// allocation on the calling thread; nothing when the writer is not running, the caller is the
// writer itself or the process is a vfork child sharing the parent's memory), then calls the next
// definition (libc's, or another preloaded tool's), found with dlsym(RTLD_NEXT) when this library
// is loaded, as dlsym is not async-signal-safe and _exit is called from signal handlers and vfork
// children. Without one, the exit_group system call, which is what libc's _exit makes.
//
// Not covered: exit_group called as a system call (syscall(SYS_exit_group, ...), inline assembly:
// it is not a symbol, nothing can interpose it) and libc's own calls to its _exit (quick_exit,
// posix_spawn's child), which bind inside libc; and every other route (NVTX_INJECTION64_PATH,
// CUDA_INJECTION64_PATH), whose library is loaded with RTLD_LOCAL, after the program's references
// to _exit were bound.

namespace {

ExitFn g_next_exit = nullptr;
ExitFn g_next_Exit = nullptr;

ExitFn NextExit(const char* name) {
  void* next = dlsym(RTLD_NEXT, name);
  return next != nullptr && !InThisLibrary(next) ? reinterpret_cast<ExitFn>(next) : nullptr;
}

[[noreturn]] void LeaveThrough(ExitFn next, int status) {
  if (const BeforeExitFn before = g_impl.before_exit; before != nullptr) before();
  if (next != nullptr) next(status);
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void _exit(int status) {
  LeaveThrough(g_next_exit, status);
}

extern "C" __attribute__((visibility("default"))) void _Exit(int status) noexcept {
  LeaveThrough(g_next_Exit, status);
}

// ---- Replacing the image: the exec family ------------------------------------------------------
//
// A successful exec ends this image without exit handlers: what was recorded but not yet written,
// and the footer, would be lost. Preloaded, these definitions come before libc's: each one lets the
// implementation seal the trace (fp8audit_agent_before_exec: every pending event and the footer,
// bounded, async-signal-safe as exec is; nothing in a vfork child or where no trace is open), then
// calls the next definition (resolved when this library is loaded). The new image loads the agent
// again and writes a trace of its own (the same pid: the next free name). When the exec fails, the
// footer is taken back (fp8audit_agent_after_failed_exec) and recording goes on in the same trace;
// errno is the exec's. execl, execlp and execle build their argument vector here and go through
// execv, execvp and execve (libc's own would call its execve directly, past this library).
//
// Before it, each one asks whether the new image loads the agent again (shim_children.h); where it
// does not, the implementation keeps a CHILD_WITHOUT_AGENT fact, given back when the exec fails.
//
// Not covered: execveat, the exec system call made directly, posix_spawn (its child execs inside
// libc; that child has recorded nothing, and a program it starts without the agent is not named).

namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvFn = int (*)(const char*, char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);

ExecveFn g_next_execve = nullptr;
ExecvFn g_next_execv = nullptr;
ExecvFn g_next_execvp = nullptr;
ExecveFn g_next_execvpe = nullptr;
FexecveFn g_next_fexecve = nullptr;

template <typename Fn>
Fn Next(const char* name) {
  void* next = dlsym(RTLD_NEXT, name);
  return next != nullptr && !InThisLibrary(next) ? reinterpret_cast<Fn>(next) : nullptr;
}

// What an exec starts: a file (looked up in PATH when `search_path`), or an open descriptor.
struct Target {
  const char* file = nullptr;
  int fd = -1;
  bool search_path = false;
  char* const* envp = nullptr;
};

// The fact's slot when `target` runs without the agent (shim_children.h), else -1.
int NoteChild(const Target& target) {
  const ChildFn note = g_impl.child_without_agent;
  if (note == nullptr) return -1;
  char resolved[PATH_MAX];
  const fp8audit::agent::ChildAgent c =
      fp8audit::agent::CheckChild(target.file, target.fd, target.search_path, target.envp,
                                  g_self_name, resolved, sizeof(resolved));
  if (c == fp8audit::agent::ChildAgent::kLoads) return -1;
  return note(fp8audit::agent::ChildAgentWord(c),
              resolved[0] != '\0' ? resolved : "(an open file descriptor)");
}

// Runs one exec of `target` through `call` (the next definition), sealing the trace around it.
template <typename Call>
int Exec(const Target& target, Call call) {
  const int saved_errno = errno;
  const int slot = NoteChild(target);
  errno = saved_errno;
  const ExecHookFn before = g_impl.before_exec;
  if (before != nullptr) before();
  const int rc = call();
  const int saved = errno;
  if (before != nullptr) g_impl.after_failed_exec();
  if (slot >= 0) g_impl.child_exec_failed(slot);
  errno = saved;
  return rc;
}

int NoExec() {
  errno = ENOSYS;
  return -1;
}

// The arguments of a list form, `first` and those after it up to the null pointer that ends them.
size_t CountArgs(const char* first, va_list* ap) {
  if (first == nullptr) return 0;
  size_t n = 1;
  while (va_arg(*ap, const char*) != nullptr) ++n;
  return n;
}

// Copies those `n` arguments into `argv` (n + 1 entries, null-terminated) and reads past the null
// pointer that ends them.
void FillArgs(const char* first, va_list* ap, const char** argv, size_t n) {
  if (n > 0) argv[0] = first;
  for (size_t i = 1; i < n; ++i) argv[i] = va_arg(*ap, const char*);
  if (n > 0) (void)va_arg(*ap, const char*);
  argv[n] = nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int execve(const char* path, char* const argv[],
                                                             char* const envp[]) noexcept {
  return Exec(Target{path, -1, false, envp},
              [&] { return g_next_execve ? g_next_execve(path, argv, envp) : NoExec(); });
}

extern "C" __attribute__((visibility("default"))) int execv(const char* path,
                                                            char* const argv[]) noexcept {
  return Exec(Target{path, -1, false, environ},
              [&] { return g_next_execv ? g_next_execv(path, argv) : NoExec(); });
}

extern "C" __attribute__((visibility("default"))) int execvp(const char* file,
                                                             char* const argv[]) noexcept {
  return Exec(Target{file, -1, true, environ},
              [&] { return g_next_execvp ? g_next_execvp(file, argv) : NoExec(); });
}

extern "C" __attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[],
                                                              char* const envp[]) noexcept {
  return Exec(Target{file, -1, true, envp},
              [&] { return g_next_execvpe ? g_next_execvpe(file, argv, envp) : NoExec(); });
}

extern "C" __attribute__((visibility("default"))) int fexecve(int fd, char* const argv[],
                                                              char* const envp[]) noexcept {
  return Exec(Target{nullptr, fd, false, envp},
              [&] { return g_next_fexecve ? g_next_fexecve(fd, argv, envp) : NoExec(); });
}

// The list forms: argv (and, for execle, envp after it) from the variadic arguments, on the stack.
extern "C" __attribute__((visibility("default"))) int execl(const char* path, const char* arg,
                                                            ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  const size_t n = CountArgs(arg, &ap);
  va_end(ap);
  auto** argv = static_cast<const char**>(__builtin_alloca((n + 1) * sizeof(char*)));
  va_start(ap, arg);
  FillArgs(arg, &ap, argv, n);
  va_end(ap);
  return execv(path, const_cast<char* const*>(argv));
}

extern "C" __attribute__((visibility("default"))) int execlp(const char* file, const char* arg,
                                                             ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  const size_t n = CountArgs(arg, &ap);
  va_end(ap);
  auto** argv = static_cast<const char**>(__builtin_alloca((n + 1) * sizeof(char*)));
  va_start(ap, arg);
  FillArgs(arg, &ap, argv, n);
  va_end(ap);
  return execvp(file, const_cast<char* const*>(argv));
}

extern "C" __attribute__((visibility("default"))) int execle(const char* path, const char* arg,
                                                             ...) noexcept {
  va_list ap;
  va_start(ap, arg);
  const size_t n = CountArgs(arg, &ap);
  va_end(ap);
  auto** argv = static_cast<const char**>(__builtin_alloca((n + 1) * sizeof(char*)));
  va_start(ap, arg);
  FillArgs(arg, &ap, argv, n);
  char* const* envp = va_arg(ap, char* const*);  // after the null pointer that ends the arguments
  va_end(ap);
  return execve(path, const_cast<char* const*>(argv), envp);
}

namespace {

__attribute__((constructor)) void Fp8auditShimLoad() {
  g_next_exit = NextExit("_exit");
  g_next_Exit = NextExit("_Exit");
  g_next_execve = Next<ExecveFn>("execve");
  g_next_execv = Next<ExecvFn>("execv");
  g_next_execvp = Next<ExecvFn>("execvp");
  g_next_execvpe = Next<ExecveFn>("execvpe");
  g_next_fexecve = Next<FexecveFn>("fexecve");
  fp8audit::agent::ResolveSignalFunctions();
  Load();
}

}  // namespace

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

// For tools that read the trace of a running process (fp8audit's pytest plugin): writes every
// event recorded so far, on every thread, to this process's trace before it returns (no footer)
// and copies the trace's path into `path` (NUL-terminated, cut to `size`). Returns 1, 0 when
// nothing was recorded yet (no trace), -1 when the agent is not recording.
extern "C" __attribute__((visibility("default"))) int fp8audit_flush(char* path, size_t size) {
  return g_impl.flush != nullptr ? g_impl.flush(path, size) : -1;
}
