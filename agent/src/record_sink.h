// The seam between the probes and the recorder: a probe hands each event it observes to a
// RecordSink, on the thread that observed it. The agent's sink (Agent, agent.h) stamps the event
// and pushes it into the thread's ring (rings.h); a unit test gives a probe a sink that keeps the
// events (TestSink, tests/agent/probes_test.cc) and drives it with made-up callback data.
#pragma once

#include <cstdint>

#include "agent/src/raw_event.h"

namespace fp8audit::agent {

// A thread's state (thread_state.h): what the recorder keeps and each probe's part, which the
// probe declares in its own header and reaches through its accessor (KernelStateOf, ...).
struct ThreadState;

// What the update probes tell one another about a thread, so that an update several of them see
// counts once (probe_control.h).
struct UpdateLedger {
  // TE update calls in progress (te_probe.h): kernel updates launched inside one are cross-checks
  // of the call.
  uint32_t te_call_depth = 0;
  // Updates counted (TE calls, kernel updates outside a TE call): a Python-hook update range in
  // which any were counted defers to them (hook_probe.h).
  uint64_t counted_updates = 0;
};
UpdateLedger& LedgerOf(ThreadState* ts);

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // The calling thread's state, created at its first use; nullptr when nothing is recorded.
  virtual ThreadState* Self() = 0;
  // Stamps `event` with the time, thread, pass and kernel-launch count, and queues it. Called on
  // the thread `thread` belongs to; may be called from a signal handler.
  virtual void Record(ThreadState* thread, RawEvent* event) = 0;
  // An update probe saw activity on this thread (a kernel launch, a TE update call, a Python-hook
  // update; `what` names it): thread roles and pass boundaries (pass_tracker.h), which may record
  // BACKWARD_BEGIN or BACKWARD_END first.
  virtual void OnActivity(ThreadState* thread, const char* what) = 0;
  // Kernel launches counted in the process (a graph launch counts each of its kernels).
  virtual void CountLaunches(uint64_t n) = 0;
  // The trace exists from the first kernel launch on, even before any event.
  virtual void EnsureTrace() = 0;
};

}  // namespace fp8audit::agent
