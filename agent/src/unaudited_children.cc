#include "agent/src/unaudited_children.h"

#include <string.h>

namespace fp8audit::agent {
namespace {

// Copies `s` into `out` (size `n`), keeping its end where it is too long: a path's file name says
// more than its first directories.
void CopyTail(const char* s, char* out, size_t n) {
  const size_t len = strlen(s);
  if (len < n) {
    memcpy(out, s, len + 1);
    return;
  }
  memcpy(out, "...", 3);
  memcpy(out + 3, s + len - (n - 4), n - 4);
  out[n - 1] = '\0';
}

}  // namespace

int UnauditedChildren::Add(uint32_t pid, const char* why, const char* path) {
  for (size_t i = 0; i < kSlots; ++i) {
    uint32_t expected = kFree;
    if (!slots_[i].state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) {
      continue;
    }
    slots_[i].pid = pid;
    CopyTail(why, slots_[i].why, sizeof(slots_[i].why));
    CopyTail(path, slots_[i].path, sizeof(slots_[i].path));
    slots_[i].state.store(kReady, std::memory_order_release);
    return static_cast<int>(i);
  }
  overflow_.fetch_add(1, std::memory_order_relaxed);
  return -1;
}

void UnauditedChildren::Retract(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= kSlots) return;
  uint32_t expected = kReady;
  slots_[slot].state.compare_exchange_strong(expected, kFree, std::memory_order_acq_rel);
}

void UnauditedChildren::Drain(const std::function<void(const std::string&)>& record) {
  for (Slot& s : slots_) {
    uint32_t expected = kReady;
    if (!s.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) continue;
    record(std::string(s.why) + " " + std::to_string(s.pid) + " " + s.path);
    s.state.store(kFree, std::memory_order_release);
  }
  if (const uint64_t more = overflow_.exchange(0, std::memory_order_relaxed); more > 0) {
    record("more " + std::to_string(more) + " (slots full)");
  }
}

void UnauditedChildren::Clear() {
  for (Slot& s : slots_) s.state.store(kFree, std::memory_order_relaxed);
  overflow_.store(0, std::memory_order_relaxed);
}

}  // namespace fp8audit::agent
