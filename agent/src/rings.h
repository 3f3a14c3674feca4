// Per-thread event rings: each recording thread pushes into its own single-producer single-consumer
// ring; the writer thread drains every ring. A ring is allocated at its thread's first push and
// retired when the thread exits (freed by the next drain). Events that do not fit are dropped and
// counted, per thread and for the process.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "agent/src/raw_event.h"

namespace fp8audit::agent {

inline constexpr size_t kRingSize = 4096;  // events buffered per thread (power of two)

// One thread's ring. Recording code derives its per-thread state from it (ThreadState).
struct alignas(64) ThreadRing {
  virtual ~ThreadRing();

  uint32_t tid = 0;  // OS thread id

  // Single-producer single-consumer ring: the thread pushes, the writer drains.
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  RawEvent* slots = nullptr;  // allocated at the first push
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> retired{false};  // the thread has exited
  ThreadRing* next = nullptr;        // registry list, under the registry mutex
};

class Rings {
 public:
  Rings() = default;
  Rings(const Rings&) = delete;
  Rings& operator=(const Rings&) = delete;

  // Creates the thread-exit key. False when it cannot (nothing can be recorded then).
  bool Init();

  // The calling thread's ring, or nullptr before Adopt on this thread (and after it exited).
  static ThreadRing* Current();
  // Registers `ring` (new, owned from now on) as the calling thread's ring.
  void Adopt(ThreadRing* ring);

  // Producer side (the ring's own thread): queues `event`; false when it was dropped (counted).
  bool Push(ThreadRing* ring, const RawEvent& event);

  // Consumer side: appends every queued event to `out` and frees the rings of exited threads.
  void Drain(std::vector<RawEvent>* out);
  // Events dropped in this process so far.
  uint64_t Dropped();

  // Held across fork() (see lifecycle.h).
  std::mutex& registry_mutex() { return mu_; }
  // In a forked child (registry mutex held by the fork handlers, released after): only `self`
  // (the forking thread's ring, may be null) is kept, emptied; the parent's other threads' rings
  // are abandoned untouched.
  void ResetInChild(ThreadRing* self);

 private:
  static void OnThreadExit(void* ring);

  pthread_key_t key_{};
  std::mutex mu_;
  ThreadRing* threads_ = nullptr;
  ThreadRing* abandoned_ = nullptr;  // a forked child's copies of the parent's other threads
  std::atomic<uint64_t> dropped_retired_{0};
};

// Monotonic and wall clocks in nanoseconds; the calling thread's OS id.
uint64_t MonotonicNs();
uint64_t UnixNs();
uint32_t CurrentTid();

}  // namespace fp8audit::agent
