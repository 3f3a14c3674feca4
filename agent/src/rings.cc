#include "agent/src/rings.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <new>

namespace fp8audit::agent {
namespace {

thread_local ThreadRing* t_ring = nullptr;

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

ThreadRing::~ThreadRing() { delete[] slots; }

bool Rings::Init() { return pthread_key_create(&key_, &Rings::OnThreadExit) == 0; }

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

bool Rings::Push(ThreadRing* ring, const RawEvent& event) {
  if (ring->slots == nullptr) {
    ring->slots = new (std::nothrow) RawEvent[kRingSize];
    if (ring->slots == nullptr) {
      ring->dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  const uint64_t h = ring->head.load(std::memory_order_relaxed);
  if (h - ring->tail.load(std::memory_order_acquire) >= kRingSize) {
    ring->dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ring->slots[h & (kRingSize - 1)] = event;
  ring->head.store(h + 1, std::memory_order_release);
  return true;
}

uint64_t Rings::Dropped() {
  uint64_t total = dropped_retired_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  for (ThreadRing* r = threads_; r != nullptr; r = r->next) {
    total += r->dropped.load(std::memory_order_relaxed);
  }
  return total;
}

void Rings::Drain(std::vector<RawEvent>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  ThreadRing** link = &threads_;
  while (*link != nullptr) {
    ThreadRing* r = *link;
    uint64_t t = r->tail.load(std::memory_order_relaxed);
    const uint64_t h = r->head.load(std::memory_order_acquire);
    for (; t < h; ++t) out->push_back(r->slots[t & (kRingSize - 1)]);
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
    self->tid = CurrentTid();
    threads_ = self;
  }
  dropped_retired_.store(0);
}

}  // namespace fp8audit::agent
