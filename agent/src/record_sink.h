// The seam between the probes and the recorder: a probe hands each event it observes to a
// RecordSink, on the thread that observed it. The agent's sink (Agent, recorder.h) stamps the event
// and pushes it into the thread's ring (rings.h); a unit test can give a probe a fake sink that
// keeps the events.
#pragma once

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
};

}  // namespace fp8audit::agent
