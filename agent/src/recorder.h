// The agent's process-wide state: configuration, per-thread event buffers, phase tracking, and the
// writer thread that drains the buffers into the trace file and feeds the live check.
//
// Threads. A thread whose name starts with "pt_autograd_" (PyTorch's autograd device threads) is an
// autograd thread: its launches and events are in the backward pass. The training thread is the
// first other thread that launches a kernel (in a forked child: the first after the fork); its
// launches are in the forward pass. Other threads' events take the pass of the last boundary. The
// first launch on an autograd thread after a forward launch records BACKWARD_BEGIN; the first
// training-thread launch after that records BACKWARD_END.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/src/config.h"
#include "agent/src/patterns.h"
#include "agent/src/raw_event.h"

namespace fp8audit::agent {

enum class Role : uint8_t { kUndecided, kTraining, kAutograd, kOther };

inline constexpr size_t kRingSize = 4096;  // events buffered per thread (power of two)
inline constexpr size_t kCacheSize = 512;  // kernel functions cached per thread (power of two)
inline constexpr int kMaxDomainStacks = 8;
inline constexpr uint64_t kFlushPeriodMs = 100;
inline constexpr uint64_t kOrderSlackNs = 20'000'000;  // events this recent wait for the next cycle

struct alignas(64) ThreadState {
  // Owned by the thread itself.
  uint32_t tid = 0;
  Role role = Role::kUndecided;
  struct RangeStack {
    const void* domain = nullptr;
    uint32_t depth = 0;
    uint64_t microbatch_bits = 0;  // bit d: the range at depth d is a microbatch range
  };
  RangeStack stacks[kMaxDomainStacks];
  int nstacks = 0;
  struct CacheEntry {
    uintptr_t key = 0;
    const FunctionInfo* info = nullptr;
  };
  CacheEntry cache[kCacheSize];
  uint64_t cache_epoch = 0;
  // Launches on this thread, and the last chunked update launch that filled a whole chunk (its
  // launch number, function, scaled_max and stream): the next launch may continue that update.
  uint64_t launch_seq = 0;
  uint64_t full_chunk_seq = 0;
  const FunctionInfo* full_chunk_fn = nullptr;
  ScaledMax full_chunk_scaled_max = ScaledMax::kNotRead;
  const void* full_chunk_stream = nullptr;

  // Single-producer single-consumer ring: the thread pushes, the writer drains.
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  RawEvent* slots = nullptr;  // allocated at the first push
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> retired{false};  // the thread has exited
  ThreadState* next = nullptr;       // registry list, under the registry mutex

  const FunctionInfo* CacheLookup(uintptr_t key) const {
    const CacheEntry& e = cache[Slot(key)];
    return e.key == key ? e.info : nullptr;
  }
  void CacheInsert(uintptr_t key, const FunctionInfo* info) { cache[Slot(key)] = {key, info}; }
  static size_t Slot(uintptr_t key) {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 40) &
           (kCacheSize - 1);
  }
};

class Agent {
 public:
  static Agent& Get();  // never destroyed

  // Reads the environment once (any entry point may call it first). Safe to call repeatedly.
  void Init();
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }
  const Config& config() const { return config_; }
  const Classifier& classifier() const { return *classifier_; }
  // The path of libfp8audit.so (what the injection variables name); set before Init().
  void SetSelfPath(const char* path) {
    if (path != nullptr && self_path_.empty()) self_path_ = path;
  }
  const std::string& self_path() const { return self_path_; }

  // This thread's state, created at first use (one allocation per thread).
  ThreadState* Self();
  // The pass of events recorded on this thread now.
  uint8_t PassOf(const ThreadState* ts) const;
  // Stamps time, thread, pass and launch count, and queues the event (dropped when full).
  void Record(ThreadState* ts, RawEvent* event);

  // Kernel launches: count, and track forward/backward boundaries.
  void CountLaunches(uint64_t n) { launches_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  void OnLaunchPhase(ThreadState* ts);
  // Starts the writer thread (creating the trace file) if it is not running yet.
  void EnsureWriter();
  // Kernel functions are cached per thread by handle until a module unloads.
  uint64_t function_epoch() const { return fn_epoch_.load(std::memory_order_relaxed); }
  void InvalidateFunctions() { fn_epoch_.fetch_add(1, std::memory_order_relaxed); }

  // One line on stderr ("fp8audit: " + text), at most once per `once` flag.
  static void Warn(const std::string& text);
  void WarnOnce(std::atomic<bool>* once, const std::string& text);

  // Clean shutdown (atexit): final flush, footer, live check verdict.
  void Shutdown();

  // Header facts about CUDA, filled by the kernel probe when it attaches.
  void SetCudaFacts(std::string gpu, std::string driver, std::string cuda);

 private:
  Agent() = default;
  friend struct AgentAccess;
  friend class Writer;

  void InitOnce();
  void InstallSignalHandlers();
  void StartWriterLocked();
  void WriterMain();
  void DrainRings(std::vector<RawEvent>* out);
  uint64_t DroppedTotal();
  void RequestFlushFromSignal(bool final);
  static void OnSignal(int sig, siginfo_t* info, void* context);
  static void OnThreadExit(void* state);
  static void ForkPrepare();
  static void ForkParent();
  static void ForkChild();
  static void ForkRelease(Agent& a);

  std::once_flag init_once_;
  std::atomic<bool> enabled_{false};
  Config config_;
  std::unique_ptr<Classifier> classifier_;
  std::string self_path_;
  std::string host_;
  uint32_t pid_ = 0;
  uint32_t parent_pid_ = 0;
  pthread_key_t thread_key_{};

  std::mutex registry_mu_;
  ThreadState* threads_ = nullptr;
  ThreadState* abandoned_ = nullptr;  // a forked child's copies of the parent's other threads
  class Writer* writer_ = nullptr;    // owned by the writer thread; kept reachable
  class Writer* abandoned_writer_ = nullptr;  // a forked child's copy of the parent's writer
  std::atomic<uint64_t> dropped_retired_{0};

  std::atomic<uint64_t> launches_{0};
  std::atomic<uint8_t> phase_{kPassForward};
  std::atomic<uint32_t> training_tid_{0};
  std::atomic<uint64_t> fn_epoch_{1};

  std::mutex facts_mu_;
  std::string gpu_, driver_, cuda_;

  // Writer thread. cycle_mu_ is held while it works (allocating, writing), and across fork(), so a
  // forked child never inherits an allocator lock the writer held (sanitizer or custom allocators
  // without fork handlers).
  std::mutex cycle_mu_;
  std::mutex writer_mu_;
  enum WriterState : int { kNotStarted = 0, kRunning = 1, kStopped = 2, kFailed = 3 };
  std::atomic<int> writer_state_{kNotStarted};
  pthread_t writer_thread_{};
  int wake_fd_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> flush_request_{0};
  std::atomic<uint32_t> flush_done_{0};
  std::atomic<int> trace_fd_{-1};
  std::atomic<bool> fail_fast_exit_{false};
  std::atomic<bool> writer_started_{false};  // the writer thread is past its start-up

  struct sigaction previous_[65] = {};
  bool handled_[65] = {};
  std::atomic<bool> in_signal_{false};
};

// Holds `mu` locked across fork() so that a forked child never inherits it locked (at most 8).
void RegisterForkMutex(std::mutex* mu);

// Monotonic and wall clocks in nanoseconds.
uint64_t MonotonicNs();
uint64_t UnixNs();
uint32_t CurrentTid();

}  // namespace fp8audit::agent
