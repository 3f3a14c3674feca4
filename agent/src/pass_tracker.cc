#include "agent/src/pass_tracker.h"

#include <string>

#include "agent/src/thread_state.h"

namespace fp8audit::agent {

uint8_t PassTracker::PassOf(const ThreadState* ts) const {
  if (ts->role == Role::kAutograd) return kPassBackward;
  if (ts->role == Role::kTraining) return kPassForward;
  return phase_.load(std::memory_order_relaxed);
}

bool PassTracker::OnActivity(ThreadState* ts, const char* what, RawEvent* boundary) {
  if (ts->role == Role::kUndecided) {
    uint32_t expected = 0;
    const bool first = training_tid_.compare_exchange_strong(expected, ts->tid);
    ts->role = (first || expected == ts->tid) ? Role::kTraining : Role::kOther;
  }
  if (ts->role == Role::kAutograd) {
    if (phase_.load(std::memory_order_relaxed) != kPassBackward &&
        phase_.exchange(kPassBackward) != kPassBackward) {
      boundary->kind = RawKind::kBackwardBegin;
      boundary->SetText(std::string(what) + " on an autograd thread");
      return true;
    }
  } else if (ts->role == Role::kTraining) {
    if (phase_.load(std::memory_order_relaxed) == kPassBackward &&
        phase_.exchange(kPassForward) == kPassBackward) {
      boundary->kind = RawKind::kBackwardEnd;
      boundary->SetText(std::string(what) + " on the training thread");
      return true;
    }
  }
  return false;
}

void PassTracker::Reset(uint32_t training_tid) {
  phase_.store(kPassForward);
  training_tid_.store(training_tid);
}

}  // namespace fp8audit::agent
