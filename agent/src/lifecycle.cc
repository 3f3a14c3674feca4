#include "agent/src/lifecycle.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace fp8audit::agent {
namespace {

// Extra mutexes (the probes' tables) held across fork so a child never inherits one locked.
std::mutex* g_fork_mutexes[8];
std::atomic<int> g_fork_mutex_count{0};

LifecycleCalls g_calls;

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
  g_calls.start_afresh_in_child();
}

}  // namespace

void RegisterForkMutex(std::mutex* mu) {
  const int i = g_fork_mutex_count.fetch_add(1);
  if (i < 8) g_fork_mutexes[i] = mu;
}

void InstallLifecycleHooks(const LifecycleCalls& calls) {
  g_calls = calls;
  pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  std::atexit(calls.at_exit);
}

}  // namespace fp8audit::agent
