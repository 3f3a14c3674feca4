#include "agent/src/lifecycle.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace fp8audit::agent {
namespace {

// Extra mutexes (the probes' tables) held across fork so a child never inherits one locked.
std::mutex* g_fork_mutexes[8];
std::atomic<int> g_fork_mutex_count{0};

struct sigaction g_previous[65] = {};
std::atomic<bool> g_in_signal{false};
LifecycleCalls g_calls;

void OnSignal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const struct sigaction prev = g_previous[sig];
  const bool plain = !(prev.sa_flags & SA_SIGINFO);
  const bool to_default = plain && prev.sa_handler == SIG_DFL;
  if (!g_in_signal.exchange(true)) {
    g_calls.flush_from_signal(to_default);
    g_in_signal.store(false);
  }
  if (to_default) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
  } else if (!plain) {
    prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

// Signals whose default action ends the process: the trace is written (footer included) before
// the process ends by the same signal. Faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL) too: the writer
// thread finishes the trace while the faulting thread waits (at most 2 s), then the default action
// runs where the fault happened.
constexpr int kFatalSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGABRT,
                                 SIGBUS,  SIGFPE,  SIGSEGV, SIGUSR1, SIGUSR2,
                                 SIGPIPE, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ};

void InstallSignalHandlers() {
  for (int sig : kFatalSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;  // e.g. nohup
    g_previous[sig] = old;
    struct sigaction act {};
    act.sa_sigaction = &OnSignal;
    act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    sigaction(sig, &act, nullptr);
  }
}

void ForkPrepare() {
  if (!g_calls.recording()) return;
  g_calls.lock_for_fork();
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = 0; i < n; ++i) g_fork_mutexes[i]->lock();
}

// Releases, in reverse order, what ForkPrepare took.
void ForkRelease() {
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = n; i-- > 0;) g_fork_mutexes[i]->unlock();
  g_calls.unlock_after_fork();
}

void ForkParent() {
  if (!g_calls.recording()) return;
  ForkRelease();
}

void ForkChild() {
  if (!g_calls.recording()) return;
  ForkRelease();
  g_in_signal.store(false);
  g_calls.start_afresh_in_child();
}

}  // namespace

void RegisterForkMutex(std::mutex* mu) {
  const int i = g_fork_mutex_count.fetch_add(1);
  if (i < 8) g_fork_mutexes[i] = mu;
}

void InstallLifecycleHooks(const LifecycleCalls& calls) {
  g_calls = calls;
  InstallSignalHandlers();
  pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  std::atexit(calls.at_exit);
}

}  // namespace fp8audit::agent
