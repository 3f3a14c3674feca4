// A test program that emits NVTX events the way a training loop and this project's runtime do.
// It links nothing of the agent: the agent reaches it through LD_PRELOAD, NVTX_INJECTION64_PATH or
// CUDA_INJECTION64_PATH (mode cuda-injection calls InitializeInjection as the driver would).
//
// Modes: basic | cuda-injection | wait | fork | failfast | flood N | probe-toggle
//        | stress THREADS MILLISECONDS | bytes ARG [HOSTNAME]  (ARG: only for argv)
//        | plant VICTIM | hook | hook-facts (what fp8audit's Python hook sends)
//        | fork-exit _exit|_Exit|silent | vfork-exit | ids (ranges naming their microbatch)
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fp8audit/nvtx_events.h"

namespace ev = fp8audit::nvtx;

namespace {

// Runs `body` on a thread named like PyTorch's autograd device thread.
template <typename F>
void OnAutogradThread(F body) {
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    body();
  });
  t.join();
}

void BasicMicrobatches() {
  // Microbatch 0: push/pop in the default domain, full structured vocabulary.
  nvtxRangePushA(ev::kMicrobatchRange);
  ev::AutocastEnter(1);
  ev::ModuleForward("fc1");
  ev::CheckpointEnter(1, 1, fp8audit::CheckpointKind::kReentrant);
  ev::StashPush("fc1", 1);
  ev::CheckpointExit(1, 1, fp8audit::CheckpointKind::kReentrant);
  ev::AutocastExit(0);
  ev::UpdateForward();
  OnAutogradThread([] {
    ev::CheckpointEnter(1, 2, fp8audit::CheckpointKind::kReentrant);
    ev::StashPop("fc1", 1);
    ev::CheckpointExit(1, 2, fp8audit::CheckpointKind::kReentrant);
    ev::ModuleBackward("fc1");
    ev::UpdateBackward();
  });
  nvtxRangePop();
  nvtxMarkA(ev::kStepMark);

  // Unrelated ranges and marks, in another domain, are not recorded.
  nvtxDomainHandle_t other = nvtxDomainCreateA("otherlib");
  nvtxEventAttributes_t a = ev::Attributes("unrelated");
  nvtxDomainRangePushEx(other, &a);
  nvtxDomainMarkEx(other, &a);
  nvtxMarkA("unrelated mark");

  // Microbatch 1: start/end range; a registered string.
  const nvtxRangeId_t id = nvtxRangeStartA(ev::kMicrobatchRange);
  nvtxEventAttributes_t reg = ev::Attributes(nullptr);
  reg.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  reg.message.registered = nvtxDomainRegisterStringA(ev::Domain(), "update.forward");
  nvtxDomainMarkEx(ev::Domain(), &reg);
  OnAutogradThread([] { ev::UpdateBackward(); });
  nvtxRangeEnd(id);
  nvtxDomainRangePop(other);

  // Microbatch 2: the emitter's own range (fp8audit domain), then a wide-character step mark.
  {
    ev::MicrobatchScope scope;
    ev::UpdateForward();
    OnAutogradThread([] { ev::UpdateBackward(); });
  }
  nvtxMarkW(L"fp8audit.step");
}

int CallInitializeInjection() {
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  if (path == nullptr) return 2;
  void* lib = dlopen(path, RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stdout, "dlopen failed: %s\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
  if (init == nullptr) return 2;
  return init() == 1 ? 0 : 2;
}

// `threads` threads emit update marks as fast as they can for `ms` milliseconds (all start
// together); prints "emitted N", the total.
void Stress(int threads, long ms) {
  std::atomic<bool> go{false};
  std::vector<uint64_t> counts(static_cast<size_t>(threads), 0);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&go, &counts, i, ms] {
      while (!go.load()) std::this_thread::yield();
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      uint64_t n = 0;
      while (std::chrono::steady_clock::now() < end) {
        for (int k = 0; k < 64; ++k) ev::Update();
        n += 64;
      }
      counts[static_cast<size_t>(i)] = n;
    });
  }
  go.store(true);
  uint64_t total = 0;
  for (int i = 0; i < threads; ++i) {
    pool[static_cast<size_t>(i)].join();
    total += counts[static_cast<size_t>(i)];
  }
  std::printf("emitted %llu\n", static_cast<unsigned long long>(total));
}

// A microbatch and a step under the configured names (FP8AUDIT_MICROBATCH_RANGE,
// FP8AUDIT_STEP_MARK, which may be any bytes) and a module name that is not UTF-8. With `host`:
// first becomes a new UTS namespace (inside a user namespace) named `host`; exit 77 when the
// system does not allow that.
int Bytes(const char* host) {
  if (host != nullptr) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWUTS) != 0 || sethostname(host, std::strlen(host)) != 0) {
      std::printf("no namespaces\n");
      return 77;
    }
  }
  nvtxRangePushA(std::getenv("FP8AUDIT_MICROBATCH_RANGE"));
  ev::ModuleForward("m\xfe\\x");
  ev::UpdateForward();
  nvtxRangePop();
  nvtxMarkA(std::getenv("FP8AUDIT_STEP_MARK"));
  return 0;
}

// Before its first NVTX call (the agent opens the trace there), plants at the trace's own name
// <host>.<pid>.fp8trace in $FP8AUDIT_OUT a symbolic link to `victim`, and a file "kept" at the
// first numbered name; then records the basic microbatches.
int Plant(const char* victim) {
  const char* out = std::getenv("FP8AUDIT_OUT");
  if (out == nullptr || (mkdir(out, 0755) != 0 && errno != EEXIST)) return 2;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  for (char* p = host; *p != '\0'; ++p) {
    if (*p == '/') *p = '_';
  }
  const std::string stem = std::string(out) + "/" + host + "." + std::to_string(getpid());
  if (symlink(victim, (stem + ".fp8trace").c_str()) != 0) return 2;
  FILE* kept = std::fopen((stem + ".1.fp8trace").c_str(), "wx");
  if (kept == nullptr) return 2;
  std::fputs("kept", kept);
  std::fclose(kept);
  BasicMicrobatches();
  return 0;
}

// One whole microbatch: a forward update on this thread, a backward one on an autograd thread.
void OneMicrobatch() {
  ev::MicrobatchScope scope;
  ev::UpdateForward();
  OnAutogradThread([] { ev::UpdateBackward(); });
}

[[noreturn]] void Leave(const std::string& how, int status) {
  if (how == "_Exit") _Exit(status);
  _exit(status);
}

// A microbatch, then a forked child that records one (none when `how` is "silent") and leaves
// through _exit or _Exit, as a Python multiprocessing child does; then the parent records another
// and leaves the same way.
[[noreturn]] void ForkExit(const std::string& how) {
  OneMicrobatch();
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    if (how != "silent") OneMicrobatch();
    Leave(how, 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  OneMicrobatch();
  Leave(how, WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// A vfork child that leaves through _exit (as after a failed exec) in the middle of a microbatch:
// it shares the parent's memory and must leave the parent's trace alone. Then another microbatch.
int VforkExit() {
  nvtxRangePushA(ev::kMicrobatchRange);
  ev::UpdateForward();
  const pid_t child = vfork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  OnAutogradThread([] { ev::UpdateBackward(); });
  nvtxRangePop();
  OneMicrobatch();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

void Ready() {
  std::printf("ready\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "basic";
  if (mode == "basic") {
    BasicMicrobatches();
    return 0;
  }
  if (mode == "cuda-injection") {
    if (const int rc = CallInitializeInjection(); rc != 0) return rc;
    BasicMicrobatches();
    return 0;
  }
  if (mode == "hook" || mode == "hook-facts") {  // as torch.cuda.nvtx: the default domain
    nvtxMarkA("fp8audit.te te=2.20.2");
    nvtxMarkA("fp8audit.patch te=2.20.2 semantics=fixed");
    if (mode == "hook-facts") return 0;
    nvtxRangePushA(ev::kMicrobatchRange);
    nvtxRangePushA("fp8audit.te.update pass=forward count=1 unfused=1");
    nvtxRangePop();
    OnAutogradThread([] {
      nvtxRangePushA("fp8audit.te.update pass=backward count=2 unfused=2");
      nvtxRangePushA("inner");
      nvtxRangePop();
      nvtxRangePop();
    });
    nvtxRangePop();
    return 0;
  }
  if (mode == "hook-lost") {  // fp8audit.te's safety net, as its mark comes: the default domain
    nvtxRangePushA(ev::kMicrobatchRange);
    nvtxRangePushA("fp8audit.te.update pass=forward count=1 unfused=1");
    nvtxRangePop();
    nvtxMarkA("fp8audit.te.lost pass=backward reason=no-owner");
    nvtxRangePop();
    return 0;
  }
  if (mode == "hook-unchecked") {  // a hook check that gave up, as its mark comes: default domain
    nvtxRangePushA(ev::kMicrobatchRange);
    nvtxMarkA("fp8audit.te.unchecked check=recompute reason=RuntimeError");
    nvtxRangePop();
    return 0;
  }
  if (mode == "ids") {  // forward 0, forward 1, backward 0, backward 1: each route's range
    nvtxRangePushA("fp8audit.microbatch id=0");  // as torch.cuda.nvtx.range_push
    ev::UpdateForward();
    nvtxRangePop();
    ev::MicrobatchBegin(1);  // as libfp8audit_markers.so: the fp8audit domain
    ev::UpdateForward();
    ev::MicrobatchEnd();
    const nvtxRangeId_t r = nvtxRangeStartA("fp8audit.microbatch id=0");
    ev::UpdateBackward();
    nvtxRangeEnd(r);
    nvtxRangePushA("fp8audit.microbatch id=1");
    ev::UpdateBackward();
    nvtxRangePop();
    nvtxRangePushA("fp8audit.microbatchx id=2");  // another range
    nvtxRangePop();
    return 0;
  }
  if (mode == "probe-toggle") {  // the benchmark toggle where no kernel probe is attached
    BasicMicrobatches();         // loads the agent through NVTX
    void* agent = dlopen(std::getenv("NVTX_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
    auto toggle = agent == nullptr
                      ? nullptr
                      : reinterpret_cast<int (*)(int)>(dlsym(agent, "fp8audit_set_launch_probe"));
    std::printf("probe=%d\n", toggle == nullptr ? 99 : toggle(0));
    return 0;
  }
  if (mode == "wait") {
    BasicMicrobatches();
    nvtxRangePushA(ev::kMicrobatchRange);  // left open: the trace ends inside it
    ev::UpdateForward();
    Ready();
    for (;;) pause();
  }
  if (mode == "hold" && argc > 2) {  // microbatches, "ready", then exit once argv[2] exists
    BasicMicrobatches();
    Ready();
    while (::access(argv[2], F_OK) != 0) usleep(10000);
    return 0;
  }
  if (mode == "fork") {
    nvtxRangePushA(ev::kMicrobatchRange);
    ev::UpdateForward();
    nvtxRangePop();
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      ev::Update(5);
      nvtxMarkA(ev::kStepMark);
      std::exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ev::UpdateBackward();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (mode == "failfast") {
    for (int mb = 0; mb < 3; ++mb) {
      nvtxRangePushA(ev::kMicrobatchRange);
      ev::UpdateForward();
      if (mb == 1) ev::UpdateForward();  // the violation
      OnAutogradThread([] { ev::UpdateBackward(); });
      nvtxRangePop();
      usleep(500000);  // the live check runs on the writer's period
    }
    std::printf("finished\n");
    return 0;
  }
  if (mode == "flood" && argc > 2) {
    const long n = std::strtol(argv[2], nullptr, 10);
    for (long i = 0; i < n; ++i) ev::Update();
    return 0;
  }
  if (mode == "fork-exit" && argc > 2) ForkExit(argv[2]);
  if (mode == "vfork-exit") return VforkExit();
  if (mode == "plant" && argc > 2) return Plant(argv[2]);
  if (mode == "bytes" && argc > 2) return Bytes(argc > 3 ? argv[3] : nullptr);
  if (mode == "stress" && argc > 3) {
    Stress(std::atoi(argv[2]), std::strtol(argv[3], nullptr, 10));
    return 0;
  }
  std::fprintf(
      stderr,
      "usage: nvtx_emitter basic|cuda-injection|wait|hold FILE|fork|failfast|flood N|probe-toggle"
      "|stress THREADS MILLISECONDS|bytes ARG [HOSTNAME]|plant VICTIM|hook|hook-facts"
      "|fork-exit _exit|_Exit|silent|vfork-exit\n");
  return 2;
}
