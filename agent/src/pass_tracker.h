// Thread roles and forward/backward boundaries, from the activity of the update probes.
//
// A thread whose name starts with "pt_autograd_" (PyTorch's autograd device threads) is an autograd
// thread: its activity and events are in the backward pass. The training thread is the first other
// thread with probe activity (a kernel launch, a TE update call, a Python-hook update; in a forked
// child the first after the fork); its events are in the forward pass. Other threads' events take
// the pass of the last boundary. The first activity on an autograd thread after forward activity
// records BACKWARD_BEGIN; the first training-thread activity after that records BACKWARD_END.
#pragma once

#include <atomic>
#include <cstdint>

#include "agent/src/raw_event.h"

namespace fp8audit::agent {

struct ThreadState;

class PassTracker {
 public:
  // The pass of events recorded on `ts` now.
  uint8_t PassOf(const ThreadState* ts) const;
  // Activity on `ts` (`what` names it). Decides the thread's role at its first activity; returns
  // true and fills `boundary` (kind and text) when a BACKWARD_BEGIN/END is to be recorded first.
  bool OnActivity(ThreadState* ts, const char* what, RawEvent* boundary);
  // A forked child: forward pass, `training_tid` (0: none yet) its training thread.
  void Reset(uint32_t training_tid);

 private:
  std::atomic<uint8_t> phase_{kPassForward};
  std::atomic<uint32_t> training_tid_{0};
};

}  // namespace fp8audit::agent
