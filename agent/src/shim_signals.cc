// The fatal signals of a job, as the job sees them (shim_signals.h). Libc only, as the rest of
// libfp8audit.so.
//
// A signal whose disposition is the default one ends the process without exit handlers: the
// trace's last events and its footer would be lost. So the agent catches those signals, finishes
// the trace, then lets the default action happen. Catching a signal must not change the job: a
// program reads dispositions back (CPython installs its SIGINT handler only where the disposition
// is SIG_DFL, and `signal.signal` returns the previous handler, which jobs save and restore;
// multiprocessing's forkserver and torchrun do). Preloaded, this library comes before libc, and
// its sigaction and signal are what the program calls: they answer with, and record, the job's own
// dispositions, while the handler actually installed is the agent's, with the job's mask and
// flags (SA_RESTART decides whether a blocked read returns EINTR, which is how CPython raises
// KeyboardInterrupt there). The agent's handler calls the job's handler, or, for the default
// action, finishes the trace, restores SIG_DFL and raises the signal again. SIG_IGN is installed
// as it is (an ignored signal stays ignored across exec, as the job meant).
//
// Not covered: glibc's own internal calls (siginterrupt edits the installed handler's flags in
// place, which is what the job wanted; sigset, bsd_signal and sysv_signal bind inside libc and set
// the disposition directly: the job then sees its own handler, and the trace ends without its
// footer if that signal's default action ends the process), and rt_sigaction made as a system call.
#include "agent/src/shim_signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);  // glibc's

namespace fp8audit::agent {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t (*)(int, sighandler_t);
SigactionFn RealSigaction();

namespace {

// Signals whose default action ends the process (faults included: the trace is finished while the
// faulting thread waits, at most 2 s, then the default action runs where the fault happened).
constexpr int kFatalSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGABRT,
                                 SIGBUS,  SIGFPE,  SIGSEGV, SIGUSR1, SIGUSR2,
                                 SIGPIPE, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ};

struct Slot {
  struct sigaction job {};  // what the job set (or found at start): what it reads back
  bool managed = false;     // the agent's handler stands in for `job`
};

SigactionFn g_real_sigaction = nullptr;
SignalFn g_real_signal = nullptr;
Slot g_slots[NSIG];
void (*g_finish)() = nullptr;
bool g_in_signal = false;  // a fatal signal is finishing the trace (one at a time)

bool IsHandler(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) != 0 || (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN);
}

bool IsIgnore(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) == 0 && a.sa_handler == SIG_IGN;
}

void OnSignal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  Slot& slot = g_slots[sig];
  const struct sigaction job = slot.job;
  if (IsHandler(job)) {
    if (job.sa_flags & SA_RESETHAND) {  // one delivery, then the default (as the kernel does)
      slot.job.sa_handler = SIG_DFL;
      slot.job.sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
    }
    if (job.sa_flags & SA_SIGINFO) {
      job.sa_sigaction(sig, info, context);
    } else {
      job.sa_handler(sig);
    }
    errno = saved_errno;
    return;
  }
  // The default action: finish the trace, then let it happen.
  if (!__atomic_exchange_n(&g_in_signal, true, __ATOMIC_ACQ_REL)) {
    if (g_finish != nullptr) g_finish();
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  g_real_sigaction(sig, &dfl, nullptr);
  slot.managed = false;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  errno = saved_errno;
}

// Installs the agent's handler in place of `job` (its mask and flags where it is a handler).
int InstallFor(int sig, const struct sigaction& job) {
  struct sigaction act {};
  act.sa_sigaction = &OnSignal;
  if (IsHandler(job)) {
    act.sa_mask = job.sa_mask;
    act.sa_flags = (job.sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
  } else {
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  }
  return g_real_sigaction(sig, &act, nullptr);
}

bool Managed(int sig) { return sig > 0 && sig < NSIG && g_slots[sig].managed; }

// The job's sigaction on a managed signal, with the signal blocked on this thread meanwhile (its
// handler reads the slot).
int JobSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  sigset_t block, was;
  sigemptyset(&block);
  sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &was);
  const struct sigaction previous = g_slots[sig].job;
  int rc = 0;
  if (act != nullptr) {
    if (IsIgnore(*act)) {
      rc = g_real_sigaction(sig, act, nullptr);
      if (rc == 0) g_slots[sig].managed = false;
    } else {
      rc = InstallFor(sig, *act);
    }
    if (rc == 0) g_slots[sig].job = *act;
  }
  const int saved = errno;
  pthread_sigmask(SIG_SETMASK, &was, nullptr);
  errno = saved;
  if (rc == 0 && old != nullptr) *old = previous;
  return rc;
}

bool InThisLibrary(void* p) {
  Dl_info mine{}, theirs{};
  return dladdr(reinterpret_cast<void*>(&OnSignal), &mine) != 0 && dladdr(p, &theirs) != 0 &&
         mine.dli_fbase == theirs.dli_fbase;
}

}  // namespace

SigactionFn RealSigaction() {
  SigactionFn f = __atomic_load_n(&g_real_sigaction, __ATOMIC_ACQUIRE);
  if (f != nullptr) return f;
  // Called before this library's constructor: by a library initialised earlier (a sanitizer
  // runtime loaded as this library's dependency, a crash reporter preloaded after it).
  ResolveSignalFunctions();
  f = __atomic_load_n(&g_real_sigaction, __ATOMIC_ACQUIRE);
  return f != nullptr ? f : &__sigaction;  // glibc's own, where no next definition was found
}

SignalFn RealSignal() {
  if (__atomic_load_n(&g_real_signal, __ATOMIC_ACQUIRE) == nullptr) ResolveSignalFunctions();
  return __atomic_load_n(&g_real_signal, __ATOMIC_ACQUIRE);
}

bool ManageFatalSignals(void (*finish)()) {
  if (finish == nullptr || g_real_sigaction == nullptr) return false;
  void* bound = dlsym(RTLD_DEFAULT, "sigaction");
  if (bound == nullptr || !InThisLibrary(bound)) return false;  // not preloaded: hands off
  g_finish = finish;
  for (int sig : kFatalSignals) {
    struct sigaction found {};
    if (g_real_sigaction(sig, nullptr, &found) != 0 || IsIgnore(found)) continue;  // e.g. nohup
    g_slots[sig].job = found;
    if (InstallFor(sig, found) == 0) g_slots[sig].managed = true;
  }
  return true;
}

void ResolveSignalFunctions() {
  void* next = dlsym(RTLD_NEXT, "sigaction");
  if (next != nullptr && !InThisLibrary(next))
    __atomic_store_n(&g_real_sigaction, reinterpret_cast<SigactionFn>(next), __ATOMIC_RELEASE);
  next = dlsym(RTLD_NEXT, "signal");
  if (next != nullptr && !InThisLibrary(next))
    __atomic_store_n(&g_real_signal, reinterpret_cast<SignalFn>(next), __ATOMIC_RELEASE);
}

}  // namespace fp8audit::agent

// BSD semantics, as glibc's signal(): the signal blocked in its handler, SA_RESTART.
static sighandler_t BsdSignal(int sig, sighandler_t handler,
                              int (*set)(int, const struct sigaction*, struct sigaction*)) {
  struct sigaction act {
  }, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (set(sig, &act, &old) != 0) return SIG_ERR;
  // A three-argument handler comes back through the same union member signal() itself returns.
  return old.sa_handler;
}

extern "C" __attribute__((visibility("default"))) int sigaction(int sig,
                                                                const struct sigaction* act,
                                                                struct sigaction* old) noexcept {
  if (fp8audit::agent::Managed(sig)) return fp8audit::agent::JobSigaction(sig, act, old);
  return fp8audit::agent::RealSigaction()(sig, act, old);
}

extern "C" __attribute__((visibility("default"))) sighandler_t signal(
    int sig, sighandler_t handler) noexcept {
  if (fp8audit::agent::Managed(sig)) {
    return BsdSignal(sig, handler, &fp8audit::agent::JobSigaction);
  }
  const fp8audit::agent::SignalFn real = fp8audit::agent::RealSignal();
  if (real != nullptr) return real(sig, handler);
  return BsdSignal(sig, handler, fp8audit::agent::RealSigaction());
}
