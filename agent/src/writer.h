// The writer: one thread that drains the per-thread rings every kFlushPeriodMs, or as soon as a
// ring fills to its wake mark (wake_pipe.h) or a flush is asked for, into the trace file
// (trace_writer.h), which it creates (with the header) when it starts. At shutdown it writes the
// footer; before an exec it seals the trace (footer included) and takes the footer back when the
// exec fails. It is the rings' consumer: a thread whose ring is full waits for it (rings.h) unless
// that thread is the writer's own or is forking, or the writer is not running; its progress is its
// CPU time. The first drop is reported once on stderr. What it records, and of which process, it
// is handed by its constructor (a TraceSource, trace_writer.h).
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "agent/src/config.h"
#include "agent/src/rings.h"
#include "agent/src/trace_writer.h"
#include "agent/src/wake_pipe.h"

namespace fp8audit::agent {

inline constexpr uint64_t kFlushPeriodMs = 100;

class WriterThread final : public RingConsumer {
 public:
  explicit WriterThread(TraceSource& source) : source_(source) {}
  WriterThread(const WriterThread&) = delete;
  WriterThread& operator=(const WriterThread&) = delete;

  // Creates the wake pipe. False when it cannot (nothing is recorded then).
  bool Init();
  // Starts the thread (which creates the trace file) unless it was started before.
  void Ensure();
  bool not_started() const { return state_.load(std::memory_order_acquire) == kNotStarted; }
  // Stopped or failed: nothing more is written.
  bool finished() const { return state_.load(std::memory_order_acquire) >= kStopped; }

  // At exit: the final cycle (everything, the footer), then joins the thread. Returns true when
  // the live check asks the process to end with status 3 (fail-fast).
  bool Stop();
  // From a signal handler: asks for a flush (or, `final`, the footer) and waits at most 2 s.
  void RequestFlushFromSignal(bool final);
  // Before _exit (Agent::FinishBeforeImmediateExit): the footer, as RequestFlushFromSignal(true),
  // unless called on the writer's own thread (its fail-fast exit has written it).
  void FinishBeforeImmediateExit();
  // Before an exec (any thread but the writer's; async-signal-safe, as RequestFlushFromSignal):
  // every pending event and the footer written, waited for at most 2 s; until
  // UnsealAfterFailedExec nothing more is written. True when sealed (or being sealed).
  bool SealForExec();
  // The exec returned: the footer is taken back and recording goes on in the same trace.
  void UnsealAfterFailedExec();
  // From any thread but the writer's: one cycle that writes every pending event (no ordering
  // slack) on the calling thread, under the writer's lock; the trace's path in `path`. Returns 1,
  // 0 when the writer has not started (nothing recorded), -1 when it stopped or failed.
  int FlushNow(std::string* path);

  // Fork: held across fork() (see lifecycle.h), and the child's fresh start (no thread, no file:
  // a new one starts at the child's first event).
  void LockForFork();
  void UnlockAfterFork();
  void ResetInChild();

  // RingConsumer.
  bool CanWaitFor(uint32_t tid) override;
  uint64_t Progress() override;
  void Wake() override;

 private:
  enum State : int { kNotStarted = 0, kRunning = 1, kStopped = 2, kFailed = 3 };
  enum Exec : int { kExecNone = 0, kExecSealing = 1, kExecSealed = 2, kExecUnsealing = 3 };
  void StartLocked();
  void Main();
  void ReportDrops(const TraceWriter& writer);

  TraceSource& source_;
  // cycle_mu_ is held while the thread works (allocating, writing), and across fork(), so a forked
  // child never inherits an allocator lock the writer held (sanitizer or custom allocators without
  // fork handlers).
  std::mutex cycle_mu_;
  std::mutex start_mu_;
  std::atomic<int> state_{kNotStarted};
  pthread_t thread_{};
  WakePipe wake_;
  std::atomic<int> exec_{kExecNone};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> flush_request_{0};
  std::atomic<uint32_t> flush_done_{0};
  std::atomic<bool> fail_fast_exit_{false};
  std::atomic<bool> started_{false};  // the thread is past its start-up
  std::atomic<uint32_t> tid_{0};      // the writer thread's id once started
  std::atomic<uint32_t> forking_tid_{0};
  std::atomic<uint64_t> cycles_{0};
  clockid_t cpu_clock_{};
  std::atomic<bool> cpu_clock_set_{false};
  bool drops_reported_ = false;       // writer thread only
  TraceWriter* writer_ = nullptr;     // owned by the thread; kept reachable
  TraceWriter* abandoned_ = nullptr;  // a forked child's copy of the parent's writer
};

}  // namespace fp8audit::agent
