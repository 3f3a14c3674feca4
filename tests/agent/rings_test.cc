// The per-thread rings with a fake consumer: what fits, the wake mark, waiting in each mode, when a
// push may not wait, signal reentrancy, exited threads.
#include "agent/src/rings.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace fp8audit::agent {
namespace {

class FakeConsumer : public RingConsumer {
 public:
  bool CanWaitFor(uint32_t) override {
    ++can_wait_calls;
    return can_wait.load();
  }
  uint64_t Progress() override {
    ++progress_calls;
    return progress.load();
  }
  void Wake() override {
    ++wakes;
    if (on_wake) on_wake();
  }

  std::atomic<bool> can_wait{true};
  std::atomic<uint64_t> progress{0};
  std::atomic<int> wakes{0};
  std::atomic<int> can_wait_calls{0};
  std::atomic<int> progress_calls{0};
  std::function<void()> on_wake;
};

RawEvent At(uint64_t i) {
  RawEvent e;
  e.ts_ns = i;
  return e;
}

struct Fixture {
  Fixture(size_t capacity, size_t wake_at, OnFull on_full, uint64_t stall_ns = 60'000'000'000) {
    EXPECT_TRUE(rings.Init());
    RingOptions o;
    o.capacity = capacity;
    o.wake_at = wake_at;
    o.on_full = on_full;
    o.stall_ns = stall_ns;
    rings.Configure(o, &consumer);
  }
  std::vector<RawEvent> Drain() {
    std::vector<RawEvent> out;
    rings.Drain(&out);
    return out;
  }
  Rings rings;
  FakeConsumer consumer;
  ThreadRing ring;  // never adopted: pushed to directly
};

TEST(AgentRings, DropModeKeepsWhatFitsAndCountsTheRest) {
  Fixture f(8, 4, OnFull::kDrop);
  int pushed = 0;
  for (uint64_t i = 0; i < 20; ++i) pushed += f.rings.Push(&f.ring, At(i)) ? 1 : 0;
  EXPECT_EQ(pushed, 8);
  EXPECT_EQ(f.ring.dropped.load(), 12u);
  EXPECT_EQ(f.rings.first_drop(), DropReason::kFull);
  EXPECT_EQ(f.consumer.can_wait_calls.load(), 0);  // drop mode never asks to wait
  // Not adopted, so a drain does not see it; what it holds is the first 8, in order.
  EXPECT_EQ(f.ring.head.load() - f.ring.tail.load(), 8u);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(f.ring.slots[i].ts_ns, i);
}

TEST(AgentRings, TheWakeMarkWakesTheConsumerOncePerFill) {
  Fixture f(16, 4, OnFull::kDrop);
  std::thread([&] {
    f.rings.Adopt(&f.ring);
    for (uint64_t i = 0; i < 3; ++i) f.rings.Push(&f.ring, At(i));
    EXPECT_EQ(f.consumer.wakes.load(), 0);
    f.rings.Push(&f.ring, At(3));
    EXPECT_EQ(f.consumer.wakes.load(), 1);
    for (uint64_t i = 4; i < 16; ++i) f.rings.Push(&f.ring, At(i));
    EXPECT_EQ(f.consumer.wakes.load(), 1);
    EXPECT_EQ(f.Drain().size(), 16u);
    for (uint64_t i = 0; i < 3; ++i) f.rings.Push(&f.ring, At(i));
    EXPECT_EQ(f.consumer.wakes.load(), 1);
    f.rings.Push(&f.ring, At(3));
    EXPECT_EQ(f.consumer.wakes.load(), 2);
  }).join();
  EXPECT_EQ(f.ring.dropped.load(), 0u);
}

TEST(AgentRings, WaitModeLosesNothingWhileTheConsumerDrains) {
  Fixture f(64, 16, OnFull::kWait);
  auto* ring = new ThreadRing();
  constexpr uint64_t kEvents = 20000;
  std::atomic<bool> done{false};
  std::vector<RawEvent> got;
  std::thread consumer([&] {
    for (;;) {
      const bool last = done.load();
      f.rings.Drain(&got);
      f.consumer.progress.fetch_add(1);
      if (last) break;
      std::this_thread::yield();
    }
  });
  std::thread producer([&] {
    f.rings.Adopt(ring);
    for (uint64_t i = 0; i < kEvents; ++i) EXPECT_TRUE(f.rings.Push(ring, At(i))) << i;
  });
  producer.join();
  done = true;
  consumer.join();
  ASSERT_EQ(got.size(), kEvents);
  for (uint64_t i = 0; i < kEvents; ++i) ASSERT_EQ(got[i].ts_ns, i);
  EXPECT_EQ(f.rings.Dropped(), 0u);
  EXPECT_EQ(f.rings.first_drop(), DropReason::kNone);
}

TEST(AgentRings, AWaitEndsWhenTheConsumerMakesNoProgressAndIsNotRepeatedUntilItDoes) {
  Fixture f(4, 4, OnFull::kWait, /*stall_ns=*/1'000'000);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(f.rings.Push(&f.ring, At(i)));
  EXPECT_FALSE(f.rings.Push(&f.ring, At(4)));  // waits until the stall limit, then drops
  EXPECT_EQ(f.rings.first_drop(), DropReason::kStalled);
  EXPECT_TRUE(f.ring.stalled);
  const int wakes = f.consumer.wakes.load();
  const int asked = f.consumer.progress_calls.load();
  EXPECT_FALSE(f.rings.Push(&f.ring, At(5)));  // no progress since: dropped without waiting
  EXPECT_EQ(f.consumer.progress_calls.load(), asked + 1);
  EXPECT_EQ(f.consumer.wakes.load(), wakes);
  f.consumer.progress = 1;  // the consumer worked (but made no room): the next push waits again
  EXPECT_FALSE(f.rings.Push(&f.ring, At(6)));
  EXPECT_GT(f.consumer.progress_calls.load(), asked + 2);
  EXPECT_EQ(f.ring.dropped.load(), 3u);
}

TEST(AgentRings, APushThatMayNotWaitDropsAtOnce) {
  Fixture f(4, 4, OnFull::kWait);
  f.consumer.can_wait = false;
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(f.rings.Push(&f.ring, At(i)));
  EXPECT_FALSE(f.rings.Push(&f.ring, At(4)));
  EXPECT_EQ(f.rings.first_drop(), DropReason::kCannotWait);
  EXPECT_EQ(f.consumer.progress_calls.load(), 0);
  Fixture none(4, 4, OnFull::kWait);
  none.rings.Configure(none.rings.options(), nullptr);  // no consumer at all
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(none.rings.Push(&none.ring, At(i)));
  EXPECT_FALSE(none.rings.Push(&none.ring, At(4)));
  EXPECT_EQ(none.rings.first_drop(), DropReason::kCannotWait);
}

TEST(AgentRings, ARecordingThatInterruptsAPushOnItsOwnThreadIsDroppedNotInterleaved) {
  Fixture f(8, 2, OnFull::kWait);
  bool inner = true;
  // The wake call runs inside the push, as a signal handler interrupting it would.
  f.consumer.on_wake = [&] { inner = f.rings.Push(&f.ring, At(99)); };
  EXPECT_TRUE(f.rings.Push(&f.ring, At(0)));
  EXPECT_TRUE(f.rings.Push(&f.ring, At(1)));  // reaches the wake mark
  EXPECT_FALSE(inner);
  EXPECT_EQ(f.rings.first_drop(), DropReason::kReentrant);
  EXPECT_EQ(f.ring.head.load(), 2u);
  EXPECT_EQ(f.ring.slots[0].ts_ns, 0u);
  EXPECT_EQ(f.ring.slots[1].ts_ns, 1u);
  EXPECT_EQ(f.ring.dropped.load(), 1u);
}

struct CountedRing : ThreadRing {
  explicit CountedRing(std::atomic<int>* deleted) : deleted(deleted) {}
  ~CountedRing() override { ++*deleted; }
  std::atomic<int>* deleted;
};

TEST(AgentRings, AnExitedThreadsRingIsFreedOnceItsEventsAreDrainedAndItsDropsStayCounted) {
  Fixture f(4, 4, OnFull::kDrop);
  std::atomic<int> deleted{0};
  std::thread([&] {
    auto* ring = new CountedRing(&deleted);
    f.rings.Adopt(ring);
    EXPECT_EQ(Rings::Current(), ring);
    for (uint64_t i = 0; i < 6; ++i) f.rings.Push(ring, At(i));
  }).join();
  EXPECT_EQ(f.rings.Dropped(), 2u);
  EXPECT_EQ(f.Drain().size(), 4u);
  EXPECT_EQ(deleted.load(), 1);
  EXPECT_EQ(f.Drain().size(), 0u);
  EXPECT_EQ(f.rings.Dropped(), 2u);
}

}  // namespace
}  // namespace fp8audit::agent
