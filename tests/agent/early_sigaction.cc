// A library whose constructor reads and sets signal dispositions, as a sanitizer runtime or a
// crash reporter does while loading: preloaded after the agent, it runs before the agent's own
// constructor, while its sigaction and signal calls already bind to the agent's (shim_signals.h).
// A call that fails ends the process with status 9 and one line.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>

namespace {

[[noreturn]] void Fail(const char* what) {
  fprintf(stderr, "early_sigaction: %s failed: %s\n", what, strerror(errno));
  _exit(9);
}

__attribute__((constructor)) void ReadAndSetDispositions() {
  struct sigaction old {};
  if (sigaction(SIGUSR2, nullptr, &old) != 0) Fail("sigaction(SIGUSR2, read)");
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (sigaction(SIGWINCH, &ignore, nullptr) != 0) Fail("sigaction(SIGWINCH, SIG_IGN)");
  if (signal(SIGWINCH, SIG_DFL) == SIG_ERR) Fail("signal(SIGWINCH, SIG_DFL)");
}

}  // namespace
