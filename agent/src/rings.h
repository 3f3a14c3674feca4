// Per-thread event rings: each recording thread pushes into its own single-producer single-consumer
// ring; the writer thread drains every ring. A ring's slots are mapped at its thread's first push
// (pages become resident as they are used) and freed by the first drain after the thread exits.
//
// Full rings. A push that takes a ring to `wake_at` events wakes the consumer (one write, once per
// fill). When the ring is full, OnFull::kDrop drops the event at once; OnFull::kWait (the default)
// sleeps until the consumer makes room and drops only when waiting is unsafe or futile: the
// consumer says this thread may not wait (the consumer's own thread, a fork under way on this
// thread, the consumer not running), or it made no progress (RingConsumer::Progress) for
// `stall_ns`, after which that ring drops without waiting until the consumer progresses again. A
// push from a signal handler that interrupted a push on the same thread is dropped. Waiting uses
// nanosleep and atomics only (async-signal-safe; no lock is taken). Every drop is counted.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "agent/src/config.h"
#include "agent/src/raw_event.h"

namespace fp8audit::agent {

inline constexpr size_t kRingSize = 16384;               // events per thread (power of two)
inline constexpr size_t kRingWakeAt = kRingSize / 4;     // a push reaching this wakes the writer
inline constexpr uint64_t kRingStallNs = 2'000'000'000;  // a waiting push gives up after this
                                                         // long without writer progress

// Why events were dropped (the first reason seen is kept for the warning).
enum class DropReason : uint8_t { kNone, kFull, kStalled, kCannotWait, kReentrant, kNoMemory };

// What a producer knows of the consumer, asked only when a ring reaches `wake_at` or is full.
class RingConsumer {
 public:
  virtual ~RingConsumer() = default;
  // Whether thread `tid` may wait for the consumer now.
  virtual bool CanWaitFor(uint32_t tid) = 0;
  // A value that changes while the consumer works (e.g. its CPU time).
  virtual uint64_t Progress() = 0;
  // Asks the consumer to drain soon. Async-signal-safe.
  virtual void Wake() = 0;
};

struct RingOptions {
  size_t capacity = kRingSize;   // power of two
  size_t wake_at = kRingWakeAt;  // 1..capacity
  OnFull on_full = OnFull::kWait;
  uint64_t stall_ns = kRingStallNs;
};

// One thread's ring. Recording code derives its per-thread state from it (ThreadState).
struct alignas(64) ThreadRing {
  virtual ~ThreadRing();

  uint32_t tid = 0;  // OS thread id

  // Single-producer single-consumer ring: the thread pushes, the writer drains.
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  RawEvent* slots = nullptr;  // mapped at the first push
  size_t slot_bytes = 0;
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> retired{false};  // the thread has exited
  ThreadRing* next = nullptr;        // registry list, under the registry mutex
  // Producer-only state.
  std::atomic<bool> pushing{false};  // a push is under way on this thread (signal reentrancy)
  bool stalled = false;              // a wait gave up at consumer progress `stalled_progress`
  uint64_t stalled_progress = 0;
};

class Rings {
 public:
  Rings() = default;
  Rings(const Rings&) = delete;
  Rings& operator=(const Rings&) = delete;

  // Creates the thread-exit key. False when it cannot (nothing can be recorded then).
  bool Init();
  // Sets the options and the consumer (may be null: never wait), before the first push.
  void Configure(const RingOptions& options, RingConsumer* consumer);
  const RingOptions& options() const { return options_; }

  // The calling thread's ring, or nullptr before Adopt on this thread (and after it exited).
  static ThreadRing* Current();
  // Registers `ring` (new, owned from now on) as the calling thread's ring.
  void Adopt(ThreadRing* ring);

  // Producer side (the ring's own thread): queues `event`; false when it was dropped (counted).
  bool Push(ThreadRing* ring, const RawEvent& event);

  // Consumer side: appends every queued event to `out` and frees the rings of exited threads.
  void Drain(std::vector<RawEvent>* out);
  // True when some ring holds events not drained yet.
  bool Queued();
  // Events dropped in this process so far, and the reason of the first drop.
  uint64_t Dropped();
  DropReason first_drop() const { return first_drop_.load(std::memory_order_relaxed); }

  // Held across fork() (see lifecycle.h).
  std::mutex& registry_mutex() { return mu_; }
  // In a forked child (registry mutex held by the fork handlers, released after): only `self`
  // (the forking thread's ring, may be null) is kept, emptied; the parent's other threads' rings
  // are abandoned untouched.
  void ResetInChild(ThreadRing* self);

 private:
  static void OnThreadExit(void* ring);
  bool PushLocked(ThreadRing* ring, const RawEvent& event);
  // Waits until `ring` has room for the event at `head`; the reason to drop when it does not.
  DropReason WaitForRoom(ThreadRing* ring, uint64_t head);
  bool Drop(ThreadRing* ring, DropReason why);

  RingOptions options_;
  RingConsumer* consumer_ = nullptr;
  pthread_key_t key_{};
  std::mutex mu_;
  ThreadRing* threads_ = nullptr;
  ThreadRing* abandoned_ = nullptr;  // a forked child's copies of the parent's other threads
  std::atomic<uint64_t> dropped_retired_{0};
  std::atomic<DropReason> first_drop_{DropReason::kNone};
};

// Monotonic and wall clocks in nanoseconds; the calling thread's OS id.
uint64_t MonotonicNs();
uint64_t UnixNs();
uint32_t CurrentTid();

}  // namespace fp8audit::agent
