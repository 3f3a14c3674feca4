// The agent's process-wide facade: configuration, the per-thread state the probes keep, and the
// record sink they push into. The pieces behind it: rings.h (per-thread buffers), pass_tracker.h
// (thread roles, forward/backward boundaries), writer.h (trace file, conversion, live check, its
// thread), lifecycle.h (signals, fork, exit), probe_control.h (which update probes run).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "agent/src/config.h"
#include "agent/src/lifecycle.h"
#include "agent/src/pass_tracker.h"
#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"
#include "agent/src/rings.h"
#include "agent/src/writer.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

enum class Role : uint8_t { kUndecided, kTraining, kAutograd, kOther };

inline constexpr size_t kCacheSize = 512;  // kernel functions cached per thread (power of two)
inline constexpr int kMaxDomainStacks = 8;
inline constexpr int kMaxHookRanges = 4;

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
  // TE update calls in progress on this thread (te_probe.h): kernel updates launched inside one are
  // cross-checks of the call.
  uint32_t te_call_depth = 0;
  // Updates recorded as counted on this thread (TE calls, kernel updates outside a TE call): a
  // Python-hook update range in which any were recorded defers to them (hook_probe.h).
  uint64_t counted_updates = 0;
  // Open Python-hook update ranges on this thread, innermost last.
  struct HookRange {
    const void* domain = nullptr;
    uint32_t level = 0;                 // its depth in the domain's range stack
    RuleEvent rule = RuleEvent::kNone;  // kUpdateForward / kUpdateBackward / kUpdate
    uint32_t count = 0;                 // updates the hook announced
    uint32_t unfused = 0;               // of which TE runs without its C entry point
    uint64_t counted_at_open = 0;       // counted_updates when the range opened
    uint8_t text_len = 0;
    char text[kRawTextBytes - 1] = {};
  };
  HookRange hook_ranges[kMaxHookRanges];
  int nhook = 0;

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
  // (dropped and counted when full). Facts (TE version, patched) do not start the writer: they
  // wait in the ring for the first other event, or the exit, so that the header written when the
  // writer starts can carry the CUDA facts the probes collect at their first activity.
  ThreadState* Self() override;
  void Record(ThreadState* ts, RawEvent* event) override;
  void OnActivity(ThreadState* ts, const char* what) override;
  void CountLaunches(uint64_t n) override { launches_.fetch_add(n, std::memory_order_relaxed); }
  void EnsureTrace() override { EnsureWriter(); }
  // The pass of events recorded on this thread now.
  uint8_t PassOf(const ThreadState* ts) const { return pass_.PassOf(ts); }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  // Starts the writer thread (creating the trace file) if it is not running yet.
  void EnsureWriter() {
    if (enabled()) writer_.Ensure();
  }

  // One line on stderr ("fp8audit: " + text), at most once per `once` flag.
  static void Warn(const std::string& text);
  void WarnOnce(std::atomic<bool>* once, const std::string& text);

  // Clean shutdown (atexit): final flush, footer, live check verdict.
  void Shutdown();
  // The process leaves through _exit or _Exit (no atexit handler runs; shim.cc calls this first):
  // the writer, when running, writes what is queued and the footer, waited for at most 2 s. Nothing
  // when no writer runs (a trace is never started here: a process that recorded nothing writes
  // none), on the writer's own thread, or in a vfork child (its pid is not this agent's: it shares
  // the parent's memory, and the parent's trace goes on). Waits with nanosleep and atomics only,
  // allocates nothing and takes no lock on the calling thread (it may be a signal handler).
  void FinishBeforeImmediateExit();
  // Before an exec (shim.cc): the trace sealed, every pending event and its footer written
  // (WriterThread::SealForExec; nothing in a vfork child or where no trace is open). After an exec
  // that failed: the footer taken back, recording goes on. Async-signal-safe, as exec is.
  void BeforeExec();
  void AfterFailedExec();

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
  PassTracker pass_;

  std::mutex facts_mu_;
  CudaFacts facts_;
};

}  // namespace fp8audit::agent
