// The agent's process-wide facade: configuration, the per-thread state the probes keep, phase
// tracking, and the record sink they push into. The pieces behind it: rings.h (per-thread
// buffers), writer.h (trace file, conversion, live check, its thread), lifecycle.h (signals, fork,
// exit).
//
// Threads. A thread whose name starts with "pt_autograd_" (PyTorch's autograd device threads) is an
// autograd thread: its launches and events are in the backward pass. The training thread is the
// first other thread that launches a kernel (in a forked child: the first after the fork); its
// launches are in the forward pass. Other threads' events take the pass of the last boundary. The
// first launch on an autograd thread after a forward launch records BACKWARD_BEGIN; the first
// training-thread launch after that records BACKWARD_END.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "agent/src/config.h"
#include "agent/src/lifecycle.h"
#include "agent/src/patterns.h"
#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"
#include "agent/src/rings.h"
#include "agent/src/writer.h"

namespace fp8audit::agent {

enum class Role : uint8_t { kUndecided, kTraining, kAutograd, kOther };

inline constexpr size_t kCacheSize = 512;  // kernel functions cached per thread (power of two)
inline constexpr int kMaxDomainStacks = 8;

// What the probes keep per thread (owned by the thread itself), beside its ring.
struct ThreadState : ThreadRing {
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

class Agent final : public RecordSink {
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
  const std::string& host() const { return host_; }
  uint32_t pid() const { return pid_; }
  uint32_t parent_pid() const { return parent_pid_; }

  // RecordSink: this thread's state (one allocation per thread), and recording into its ring
  // (dropped and counted when full).
  ThreadState* Self() override;
  void Record(ThreadState* ts, RawEvent* event) override;
  // The pass of events recorded on this thread now.
  uint8_t PassOf(const ThreadState* ts) const;

  // Kernel launches: count, and track forward/backward boundaries.
  void CountLaunches(uint64_t n) { launches_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  void OnLaunchPhase(ThreadState* ts);
  // Starts the writer thread (creating the trace file) if it is not running yet.
  void EnsureWriter() {
    if (enabled()) writer_.Ensure();
  }
  // Kernel functions are cached per thread by handle until a module unloads.
  uint64_t function_epoch() const { return fn_epoch_.load(std::memory_order_relaxed); }
  void InvalidateFunctions() { fn_epoch_.fetch_add(1, std::memory_order_relaxed); }

  // One line on stderr ("fp8audit: " + text), at most once per `once` flag.
  static void Warn(const std::string& text);
  void WarnOnce(std::atomic<bool>* once, const std::string& text);

  // Clean shutdown (atexit): final flush, footer, live check verdict.
  void Shutdown();

  void SetCudaFacts(std::string gpu, std::string driver, std::string cuda);
  void SetCupti(std::string path, uint32_t api_version);
  CudaFacts cuda_facts();

  Rings& rings() { return rings_; }
  WriterThread& writer() { return writer_; }
  // Held across fork() with the others (lifecycle.cc).
  std::mutex& facts_mutex() { return facts_mu_; }
  // In a forked child: a new pid, the forking thread's state only, no writer yet.
  void StartAfresh();

 private:
  Agent() : writer_(*this) {}
  void InitOnce();

  std::once_flag init_once_;
  std::atomic<bool> enabled_{false};
  Config config_;
  std::unique_ptr<Classifier> classifier_;
  std::string self_path_;
  std::string host_;
  uint32_t pid_ = 0;
  uint32_t parent_pid_ = 0;

  Rings rings_;
  WriterThread writer_;

  std::atomic<uint64_t> launches_{0};
  std::atomic<uint8_t> phase_{kPassForward};
  std::atomic<uint32_t> training_tid_{0};
  std::atomic<uint64_t> fn_epoch_{1};

  std::mutex facts_mu_;
  CudaFacts facts_;
};

}  // namespace fp8audit::agent
