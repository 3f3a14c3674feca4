// Execs whose new image runs without the agent (shim_children.h decides), kept until they can be
// recorded as CHILD_WITHOUT_AGENT facts.
//
// The exec is often made in a vfork child (CPython's subprocess, posix_spawn's fallbacks): it
// shares this process's memory while the parent waits, may not allocate, lock or start the
// writer, and its pid is not the agent's. So the exec's side only claims a slot here, with atomics
// and plain stores (async-signal-safe), and the parent records the slots later: on the writer's
// next cycle, or at exit (Agent::Shutdown). An exec that fails gives its slot back. A child of a
// plain fork is its own process: it records its slot at once, so the fact is sealed in its own
// trace before the exec.
#ifndef FP8AUDIT_AGENT_SRC_UNAUDITED_CHILDREN_H_
#define FP8AUDIT_AGENT_SRC_UNAUDITED_CHILDREN_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <functional>
#include <string>

namespace fp8audit::agent {

class UnauditedChildren {
 public:
  static constexpr size_t kSlots = 16;
  static constexpr size_t kPathBytes = 96;

  // Claims a slot for process `pid` exec'ing `path` (`why`: a word, "environment"); its index, or
  // -1 when every slot is taken (counted: the fact then says how many more there were).
  int Add(uint32_t pid, const char* why, const char* path);
  // The exec of slot `slot` failed: the slot is free again, nothing is recorded for it.
  void Retract(int slot);
  // Hands each claimed slot's fact text ("<why> <pid> <path>") to `record`, once, and frees it.
  void Drain(const std::function<void(const std::string&)>& record);
  // Forgets every slot (a fork child: the parent's slots are the parent's to record).
  void Clear();

 private:
  enum State : uint32_t { kFree = 0, kWriting = 1, kReady = 2 };
  struct Slot {
    std::atomic<uint32_t> state{kFree};
    uint32_t pid = 0;
    char why[16] = {};
    char path[kPathBytes] = {};
  };
  Slot slots_[kSlots];
  std::atomic<uint64_t> overflow_{0};
};

}  // namespace fp8audit::agent

#endif  // FP8AUDIT_AGENT_SRC_UNAUDITED_CHILDREN_H_
