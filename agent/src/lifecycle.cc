#include "agent/src/lifecycle.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "agent/src/recorder.h"

namespace fp8audit::agent {
namespace {

// Extra mutexes (the probes' tables) held across fork so a child never inherits one locked.
std::mutex* g_fork_mutexes[8];
std::atomic<int> g_fork_mutex_count{0};

struct sigaction g_previous[65] = {};
std::atomic<bool> g_in_signal{false};

void OnSignal(int sig, siginfo_t* info, void* context) {
  Agent& a = Agent::Get();
  const int saved_errno = errno;
  const struct sigaction prev = g_previous[sig];
  const bool plain = !(prev.sa_flags & SA_SIGINFO);
  const bool to_default = plain && prev.sa_handler == SIG_DFL;
  if (!g_in_signal.exchange(true)) {
    a.writer().RequestFlushFromSignal(to_default);
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
  Agent& a = Agent::Get();
  if (!a.enabled()) return;
  a.writer().LockForFork();
  a.rings().registry_mutex().lock();
  a.facts_mutex().lock();
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = 0; i < n; ++i) g_fork_mutexes[i]->lock();
}

// Releases, in reverse order, what ForkPrepare took.
void ForkRelease(Agent& a) {
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = n; i-- > 0;) g_fork_mutexes[i]->unlock();
  a.facts_mutex().unlock();
  a.rings().registry_mutex().unlock();
  a.writer().UnlockAfterFork();
}

void ForkParent() {
  Agent& a = Agent::Get();
  if (!a.enabled()) return;
  ForkRelease(a);
}

void ForkChild() {
  Agent& a = Agent::Get();
  if (!a.enabled()) return;
  ForkRelease(a);
  g_in_signal.store(false);
  a.StartAfresh();
}

}  // namespace

void RegisterForkMutex(std::mutex* mu) {
  const int i = g_fork_mutex_count.fetch_add(1);
  if (i < 8) g_fork_mutexes[i] = mu;
}

void InstallLifecycleHooks() {
  InstallSignalHandlers();
  pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  std::atexit([] { Agent::Get().Shutdown(); });
}

}  // namespace fp8audit::agent
