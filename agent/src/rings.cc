#include "agent/src/rings.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace fp8audit::agent {
namespace {

static_assert(std::is_trivially_copyable_v<RawEvent>, "ring slots are copied with memcpy");

thread_local ThreadRing* t_ring = nullptr;

void SleepNs(uint64_t ns) {
  timespec t{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  ::nanosleep(&t, nullptr);
}

}  // namespace

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t UnixNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t CurrentTid() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

ThreadRing::~ThreadRing() {
  if (slots != nullptr) ::munmap(slots, slot_bytes);
}

bool Rings::Init() { return pthread_key_create(&key_, &Rings::OnThreadExit) == 0; }

void Rings::Configure(const RingOptions& options, RingConsumer* consumer) {
  options_ = options;
  if (options_.capacity == 0 || (options_.capacity & (options_.capacity - 1)) != 0) {
    options_.capacity = kRingSize;
  }
  options_.wake_at = std::clamp<size_t>(options_.wake_at, 1, options_.capacity);
  consumer_ = consumer;
}

ThreadRing* Rings::Current() { return t_ring; }

void Rings::Adopt(ThreadRing* ring) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ring->next = threads_;
    threads_ = ring;
  }
  pthread_setspecific(key_, ring);
  t_ring = ring;
}

void Rings::OnThreadExit(void* state) {
  auto* ring = static_cast<ThreadRing*>(state);
  if (t_ring == ring) t_ring = nullptr;
  ring->retired.store(true, std::memory_order_release);
}

bool Rings::Drop(ThreadRing* ring, DropReason why) {
  ring->dropped.fetch_add(1, std::memory_order_relaxed);
  DropReason none = DropReason::kNone;
  first_drop_.compare_exchange_strong(none, why, std::memory_order_relaxed);
  return false;
}

bool Rings::Push(ThreadRing* ring, const RawEvent& event) {
  // A signal handler that records while this thread is inside a push (or a wait) would corrupt
  // the ring: that event is dropped instead.
  if (ring->pushing.load(std::memory_order_relaxed)) return Drop(ring, DropReason::kReentrant);
  ring->pushing.store(true, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  const bool ok = PushLocked(ring, event);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ring->pushing.store(false, std::memory_order_relaxed);
  return ok;
}

bool Rings::PushLocked(ThreadRing* ring, const RawEvent& event) {
  const size_t capacity = options_.capacity;
  if (ring->slots == nullptr) {
    const size_t bytes = capacity * sizeof(RawEvent);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Drop(ring, DropReason::kNoMemory);
    ring->slots = static_cast<RawEvent*>(p);
    ring->slot_bytes = bytes;
  }
  const uint64_t h = ring->head.load(std::memory_order_relaxed);
  uint64_t t = ring->tail.load(std::memory_order_acquire);
  if (h - t >= capacity) {
    if (options_.on_full == OnFull::kDrop) return Drop(ring, DropReason::kFull);
    const DropReason why = WaitForRoom(ring, h);
    if (why != DropReason::kNone) return Drop(ring, why);
    t = ring->tail.load(std::memory_order_acquire);
  }
  std::memcpy(static_cast<void*>(&ring->slots[h & (capacity - 1)]), &event, sizeof(RawEvent));
  ring->head.store(h + 1, std::memory_order_release);
  // One wake per fill: the push that takes the ring to wake_at events (the count grows by one per
  // push, so it passes that value exactly once between two drains).
  if (h + 1 - t == options_.wake_at && consumer_ != nullptr) consumer_->Wake();
  return true;
}

DropReason Rings::WaitForRoom(ThreadRing* ring, uint64_t head) {
  if (consumer_ == nullptr || !consumer_->CanWaitFor(ring->tid)) return DropReason::kCannotWait;
  uint64_t progress = consumer_->Progress();
  if (ring->stalled && progress == ring->stalled_progress) return DropReason::kStalled;
  ring->stalled = false;
  consumer_->Wake();
  uint64_t since = MonotonicNs();
  uint64_t nap = 20'000;  // 20 µs, doubling to 1 ms
  for (;;) {
    SleepNs(nap);
    nap = std::min<uint64_t>(nap * 2, 1'000'000);
    if (head - ring->tail.load(std::memory_order_acquire) < options_.capacity) {
      return DropReason::kNone;
    }
    if (!consumer_->CanWaitFor(ring->tid)) return DropReason::kCannotWait;
    const uint64_t now_progress = consumer_->Progress();
    const uint64_t now = MonotonicNs();
    if (now_progress != progress) {
      progress = now_progress;
      since = now;
    } else if (now - since >= options_.stall_ns) {
      ring->stalled = true;
      ring->stalled_progress = progress;
      return DropReason::kStalled;
    }
  }
}

uint64_t Rings::Dropped() {
  uint64_t total = dropped_retired_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  for (ThreadRing* r = threads_; r != nullptr; r = r->next) {
    total += r->dropped.load(std::memory_order_relaxed);
  }
  return total;
}

bool Rings::Queued() {
  std::lock_guard<std::mutex> lock(mu_);
  for (ThreadRing* r = threads_; r != nullptr; r = r->next) {
    if (r->head.load(std::memory_order_acquire) != r->tail.load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void Rings::Drain(std::vector<RawEvent>* out) {
  const uint64_t mask = options_.capacity - 1;
  std::lock_guard<std::mutex> lock(mu_);
  ThreadRing** link = &threads_;
  while (*link != nullptr) {
    ThreadRing* r = *link;
    uint64_t t = r->tail.load(std::memory_order_relaxed);
    const uint64_t h = r->head.load(std::memory_order_acquire);
    for (; t < h; ++t) {
      RawEvent e;
      std::memcpy(static_cast<void*>(&e), &r->slots[t & mask], sizeof(RawEvent));
      out->push_back(e);
    }
    r->tail.store(h, std::memory_order_release);
    if (r->retired.load(std::memory_order_acquire) &&
        r->head.load(std::memory_order_acquire) == h) {
      *link = r->next;
      dropped_retired_.fetch_add(r->dropped.load(std::memory_order_relaxed),
                                 std::memory_order_relaxed);
      delete r;
      continue;
    }
    link = &r->next;
  }
}

void Rings::ResetInChild(ThreadRing* self) {
  for (ThreadRing* r = threads_; r != nullptr;) {
    ThreadRing* next = r->next;
    if (r != self) {
      r->next = abandoned_;
      abandoned_ = r;
    }
    r = next;
  }
  threads_ = nullptr;
  if (self != nullptr) {
    self->next = nullptr;
    self->head.store(0);
    self->tail.store(0);
    self->dropped.store(0);
    self->pushing.store(false);
    self->stalled = false;
    self->tid = CurrentTid();
    threads_ = self;
  }
  dropped_retired_.store(0);
  first_drop_.store(DropReason::kNone);
}

}  // namespace fp8audit::agent
