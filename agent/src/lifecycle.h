// Process lifecycle around the recorder: signals whose default action ends the process (SIGTERM,
// SIGINT, SIGHUP, SIGQUIT, SIGABRT, faults such as SIGSEGV, ...: flush, then the job's own
// disposition; the default one re-raised after the footer), fork (the agent's locks are held across
// fork() so a child never inherits one locked; the child starts afresh with its own trace) and exit
// (atexit: the final flush and footer).
#pragma once

#include <mutex>

namespace fp8audit::agent {

// Installs the signal handlers, fork handlers and the exit hook, once, for Agent::Get().
void InstallLifecycleHooks();

// Holds `mu` locked across fork() so that a forked child never inherits it locked (at most 8).
void RegisterForkMutex(std::mutex* mu);

}  // namespace fp8audit::agent
