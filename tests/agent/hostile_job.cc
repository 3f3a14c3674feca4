// A job that does, under the preloaded agent, what a careless or hostile program does to the
// process the agent lives in (tests/agent/hostile_test.cc). It links nothing of the agent; it finds
// fp8audit_flush (libfp8audit.so) with dlsym where it needs the trace written up to a point.
//
// Modes:
//   reuse-fds DIR         closes every descriptor from 3 up (as os.closerange), opens 8 files of
//                         its own in DIR, writes one line to each, records on; prints "files
//                         intact" when its files hold exactly its lines
//   exec SELF             two microbatches (the second with two forward updates), then execv of
//                         SELF after-exec: the new image records one microbatch
//   exec-fails            a microbatch, an execv that fails, another microbatch
//   vfork-exec            inside a microbatch a vfork child execs /bin/true
//   signal NAME           three microbatches (the third with two forward updates), then ends by
//                         SIGHUP, SIGQUIT, SIGUSR1 (kill), SIGABRT (abort) or SIGSEGV (a fault)
//   full-disk restore|keep  40 microbatches, then the file size limit just above the trace's size:
//                         three microbatches (the second with two backward updates) and a flush
//                         that cannot all be written; `restore` lifts the limit and records two
//                         more
//   full-disk start       no room from the first event on (not even for the header): a
//                         microbatch and a flush; then room, and one more microbatch
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "fp8audit/nvtx_events.h"

namespace ev = fp8audit::nvtx;

namespace {

// Runs `body` on a thread named like PyTorch's autograd device thread.
template <typename F>
void OnAutogradThread(F body) {
  std::thread t([&body] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    body();
  });
  t.join();
}

// One microbatch: `forward` forward updates here, `backward` on an autograd thread.
void Microbatch(int forward = 1, int backward = 1) {
  ev::MicrobatchScope scope;
  for (int i = 0; i < forward; ++i) ev::UpdateForward();
  OnAutogradThread([backward] {
    for (int i = 0; i < backward; ++i) ev::UpdateBackward();
  });
}

// fp8audit_flush of the preloaded agent: 1 and the trace's path once something was recorded.
std::string Flush() {
  using FlushFn = int (*)(char*, size_t);
  auto flush = reinterpret_cast<FlushFn>(dlsym(RTLD_DEFAULT, "fp8audit_flush"));
  char path[4096] = {};
  if (flush == nullptr || flush(path, sizeof(path)) != 1) return "";
  return path;
}

void CloseFrom(int first) {
  if (syscall(SYS_close_range, first, ~0u, 0) == 0) return;
  for (int fd = first; fd < 65536; ++fd) close(fd);
}

int ReuseFds(const std::string& dir) {
  Microbatch();
  if (Flush().empty()) return 2;  // the trace is open: its descriptor and the wake pipe exist
  CloseFrom(3);
  constexpr int kFiles = 8;
  int fds[kFiles];
  std::string lines[kFiles];
  for (int i = 0; i < kFiles; ++i) {
    const std::string path = dir + "/job." + std::to_string(i);
    fds[i] = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    lines[i] = "job file " + std::to_string(i) + " at fd " + std::to_string(fds[i]) + "\n";
    if (fds[i] < 0 ||
        write(fds[i], lines[i].data(), lines[i].size()) != static_cast<ssize_t>(lines[i].size())) {
      return 2;
    }
  }
  // Enough events on one thread to wake the writer through its pipe (a ring's wake mark), in a
  // microbatch with two forward updates; then one that passes, written by a flush and at exit.
  {
    ev::MicrobatchScope scope;
    for (int i = 0; i < 5000; ++i) ev::ModuleForward("layer");
    ev::UpdateForward();
    ev::UpdateForward();
    OnAutogradThread([] { ev::UpdateBackward(); });
  }
  Flush();
  Microbatch();
  Flush();
  bool intact = true;
  for (int i = 0; i < kFiles; ++i) {
    char buf[256] = {};
    struct stat st {};
    const ssize_t n = pread(fds[i], buf, sizeof(buf), 0);
    const off_t at = lseek(fds[i], 0, SEEK_CUR);
    if (fstat(fds[i], &st) != 0 || n != static_cast<ssize_t>(lines[i].size()) ||
        lines[i] != std::string(buf, static_cast<size_t>(n)) ||
        at != static_cast<off_t>(lines[i].size())) {
      std::printf("file %d damaged: %lld bytes, offset %lld\n", i, static_cast<long long>(n),
                  static_cast<long long>(at));
      intact = false;
    }
  }
  if (intact) std::printf("files intact\n");
  return 0;
}

int Exec(const char* self) {
  Microbatch();
  Microbatch(2);
  std::fflush(stdout);
  execl(self, self, "after-exec", static_cast<char*>(nullptr));
  std::printf("exec failed: %s\n", std::strerror(errno));
  return 2;
}

int ExecFails() {
  Microbatch();
  const char* argv[] = {"/nonexistent/fp8audit-test", nullptr};
  const int rc = execv(argv[0], const_cast<char* const*>(argv));
  const int saved = errno;
  Microbatch();
  std::printf("execv returned %d (%s)\n", rc, std::strerror(saved));
  return 0;
}

int VforkExec() {
  ev::MicrobatchScope scope;
  ev::UpdateForward();
  const pid_t child = vfork();
  if (child == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  OnAutogradThread([] { ev::UpdateBackward(); });
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int Signal(const std::string& name) {
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  // the job dies by the signal; it leaves no core file
  Microbatch();
  Microbatch();
  Microbatch(2);
  if (name == "SIGSEGV") {
    volatile int* nowhere = reinterpret_cast<volatile int*>(std::getenv("NO_SUCH_VARIABLE_SET"));
    *nowhere = 1;
  } else if (name == "SIGABRT") {
    std::abort();
  } else if (name == "SIGHUP") {
    kill(getpid(), SIGHUP);
  } else if (name == "SIGQUIT") {
    kill(getpid(), SIGQUIT);
  } else if (name == "SIGUSR1") {
    kill(getpid(), SIGUSR1);
  }
  std::printf("still running after %s\n", name.c_str());
  return 2;
}

constexpr int kFullDiskFirst = 40;

int FullDisk(const std::string& how) {
  signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
  if (how == "start") {
    // Full before the trace begins: not even its header fits. Then room, and a second microbatch.
    rlimit old{};
    if (getrlimit(RLIMIT_FSIZE, &old) != 0) return 2;
    rlimit full = old;
    full.rlim_cur = 0;
    if (setrlimit(RLIMIT_FSIZE, &full) != 0) return 2;
    Microbatch();
    Flush();
    if (setrlimit(RLIMIT_FSIZE, &old) != 0) return 2;
    Microbatch();
    std::printf("done\n");
    return 0;
  }
  // A trace larger than what the job's stderr will hold: the limit applies to that file too.
  for (int i = 0; i < kFullDiskFirst; ++i) Microbatch();
  const std::string path = Flush();
  struct stat st {};
  rlimit old{};
  if (path.empty() || stat(path.c_str(), &st) != 0 || getrlimit(RLIMIT_FSIZE, &old) != 0) return 2;
  // Room for part of the next flush only: it is cut short inside a record.
  rlimit full = old;
  full.rlim_cur = static_cast<rlim_t>(st.st_size) + 40;
  if (setrlimit(RLIMIT_FSIZE, &full) != 0) return 2;
  Microbatch();
  Microbatch(1, 2);
  Microbatch();
  Flush();
  if (how == "restore") {
    if (setrlimit(RLIMIT_FSIZE, &old) != 0) return 2;
    Microbatch();
    Microbatch();
  }
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg = argc > 2 ? argv[2] : "";
  if (mode == "reuse-fds" && !arg.empty()) return ReuseFds(arg);
  if (mode == "exec" && !arg.empty()) return Exec(argv[2]);
  if (mode == "after-exec") {
    Microbatch();
    return 0;
  }
  if (mode == "exec-fails") return ExecFails();
  if (mode == "vfork-exec") return VforkExec();
  if (mode == "signal" && !arg.empty()) return Signal(arg);
  if (mode == "full-disk" && (arg == "restore" || arg == "keep" || arg == "start")) {
    return FullDisk(arg);
  }
  std::fprintf(stderr,
               "usage: hostile_job reuse-fds DIR | exec SELF | exec-fails | vfork-exec | signal "
               "SIGHUP|SIGQUIT|SIGUSR1|SIGABRT|SIGSEGV | full-disk restore|keep|start\n");
  return 2;
}
