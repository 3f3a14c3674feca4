// A shared library that records a whole microbatch through NVTX when called, for test programs that
// cannot include the NVTX headers themselves (Python, through ctypes: tests/agent/fork_exit.py). It
// links nothing of the agent; the agent sees its NVTX calls as it sees nvtx_emitter's.
#include <pthread.h>

#include <thread>

#include "fp8audit/nvtx_events.h"

namespace ev = fp8audit::nvtx;

// A forward update on the calling thread, a backward one on a thread named like PyTorch's autograd
// device thread, inside one microbatch range.
extern "C" __attribute__((visibility("default"))) void fp8audit_test_microbatch() {
  ev::MicrobatchScope scope;
  ev::UpdateForward();
  std::thread autograd([] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    ev::UpdateBackward();
  });
  autograd.join();
}
