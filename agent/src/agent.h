// The agent's process-wide facade, on top of every other unit: configuration, the per-thread state
// the probes keep (thread_state.h), and the record sink they push into. It builds the pieces and
// hands each what it needs (nothing below reaches back up to it): rings.h (per-thread buffers),
// pass_tracker.h (thread roles, forward/backward boundaries), writer.h (trace file, conversion,
// live check, its thread; handed the agent as its TraceSource), lifecycle.h (signals, fork, exit;
// handed plain calls), probe_control.h (which update probes run; handed a ProbeHost).
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
#include "agent/src/thread_state.h"
#include "agent/src/trace_writer.h"
#include "agent/src/unaudited_children.h"
#include "agent/src/writer.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

class Agent final : public RecordSink, public TraceSource {
 public:
  static Agent& Get();  // never destroyed

  // Reads the environment once (any entry point may call it first). Safe to call repeatedly.
  void Init();
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }
  const Config& config() const override { return config_; }
  const Classifier& classifier() const { return *classifier_; }
  // The path of libfp8audit.so (what the injection variables name); set before Init().
  void SetSelfPath(const char* path) {
    if (path != nullptr && self_path_.empty()) self_path_ = path;
  }
  const std::string& self_path() const { return self_path_; }
  const std::string& host() const override { return host_; }
  uint32_t pid() const override { return pid_; }
  uint32_t parent_pid() const override { return parent_pid_; }

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
  uint64_t launches() const override { return launches_.load(std::memory_order_relaxed); }
  // Starts the writer thread (creating the trace file) if it is not running yet.
  void EnsureWriter() {
    if (enabled()) writer_.Ensure();
  }

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
  // An exec whose new image runs without the agent (shim.cc, shim_children.h; `why`: "environment"
  // or "privileged"): kept as a CHILD_WITHOUT_AGENT fact (unaudited_children.h), recorded at once
  // in a process of its own, later by the parent from a vfork child. Returns the slot to give back
  // when the exec fails (ChildExecFailed), or -1. Async-signal-safe in a vfork child.
  int NoteChildWithoutAgent(const char* why, const char* path);
  void ChildExecFailed(int slot) { children_.Retract(slot); }
  // Records the facts of NoteChildWithoutAgent not recorded yet (the writer's cycle, the exit).
  void RecordChildrenWithoutAgent();
  // fp8audit_flush: the trace written up to now, synchronously, with the programs started without
  // the agent so far (a vfork child's note waits for the writer's cycle otherwise); the writer
  // started where only such facts are queued. WriterThread::FlushNow's result.
  int Flush(std::string* path);

  void SetCudaFacts(std::string gpu, std::string driver, std::string cuda);
  void SetCupti(std::string path, uint32_t api_version);
  CudaFacts cuda_facts() override;

  // TraceSource: the rest, for the writer.
  Rings& rings() override { return rings_; }
  uint32_t probes() const override;
  void OnWriterCycle() override;

  WriterThread& writer() { return writer_; }

 private:
  Agent() : writer_(*this) {}
  void InitOnce();
  // Fork (lifecycle.h): the writer's, the rings' and the facts' locks held across fork(); in the
  // child, a new pid, the forking thread's state only, no writer yet.
  void LockForFork();
  void UnlockAfterFork();
  void StartAfresh();

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
  UnauditedChildren children_;

  std::atomic<uint64_t> launches_{0};
  PassTracker pass_;

  std::mutex facts_mu_;
  CudaFacts facts_;
};

// GPU name, driver release and CUDA versions (CudaDriverFacts) into the trace header's facts, asked
// of the loaded driver at most once per process (any probe, on an application thread, at its first
// activity).
void CollectCudaFactsOnce();

}  // namespace fp8audit::agent
