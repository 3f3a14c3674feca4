// Process lifecycle around the recorder: fork (the agent's locks are held across fork() so a child
// never inherits one locked; the child starts afresh with its own trace) and exit (atexit: the
// final flush and footer). Fatal signals are libfp8audit.so's (shim_signals.h), which calls the
// same final flush as _exit (Agent::FinishBeforeImmediateExit) before a default action.
#pragma once

#include <mutex>

namespace fp8audit::agent {

// What the hooks call, handed by the one who installs them (the agent, agent.cc). Plain functions:
// the signal handler and the fork handlers call them.
struct LifecycleCalls {
  // Fork: whether anything is recorded (else the fork handlers do nothing); the agent's own locks
  // taken before fork() (before the registered mutexes) and released after it (after them); in the
  // child, after the release, its fresh start.
  bool (*recording)() = nullptr;
  void (*lock_for_fork)() = nullptr;
  void (*unlock_after_fork)() = nullptr;
  void (*start_afresh_in_child)() = nullptr;
  // atexit: the final flush and footer.
  void (*at_exit)() = nullptr;
};

// Installs the fork handlers and the exit hook, once; every member of `calls` set.
void InstallLifecycleHooks(const LifecycleCalls& calls);

// Holds `mu` locked across fork() so that a forked child never inherits it locked (at most 8).
void RegisterForkMutex(std::mutex* mu);

}  // namespace fp8audit::agent
