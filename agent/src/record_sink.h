// The seam between the probes and the recorder: a probe hands each event it observes to a
// RecordSink, on the thread that observed it. The agent's sink (Agent, agent.h) stamps the event
// and pushes it into the thread's ring (rings.h); a unit test gives a probe a sink that keeps the
// events (TestSink, tests/agent/probes_test.cc) and drives it with made-up callback data.
#pragma once

#include <cstdint>

#include "agent/src/raw_event.h"

namespace fp8audit::agent {

struct ThreadState;

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
