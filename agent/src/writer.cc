#include "agent/src/writer.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "agent/src/warn.h"

namespace fp8audit::agent {

namespace {

std::string DropCause(DropReason why, const RingOptions& o) {
  const std::string full =
      "a thread's buffer of " + std::to_string(o.capacity) + " events was full";
  switch (why) {
    case DropReason::kFull:
      return full + " under FP8AUDIT_ON_FULL=drop; the default, wait, lets it wait for the writer";
    case DropReason::kStalled:
      return full + " and the trace writer made no progress for " +
             std::to_string(o.stall_ns / 1'000'000) + " ms";
    case DropReason::kCannotWait:
      return full +
             " where it may not wait for the writer (the writer's own thread, a fork under "
             "way, or the writer stopped)";
    case DropReason::kReentrant:
      return "a signal handler recorded while its thread was recording";
    case DropReason::kNoMemory:
      return "no memory for a thread's buffer";
    case DropReason::kNone:
      break;
  }
  return "unknown cause";
}

bool BlockAllSignals(sigset_t* previous) {
  sigset_t all;
  sigfillset(&all);
  return pthread_sigmask(SIG_BLOCK, &all, previous) == 0;
}

}  // namespace

// ---- The writer thread -----------------------------------------------------------------------

bool WriterThread::Init() { return wake_.Open(); }

void WriterThread::Ensure() {
  if (state_.load(std::memory_order_acquire) != kNotStarted) return;
  std::lock_guard<std::mutex> lock(start_mu_);
  if (state_.load(std::memory_order_acquire) != kNotStarted) return;
  StartLocked();
}

void WriterThread::StartLocked() {
  state_.store(kRunning, std::memory_order_release);
  sigset_t previous;
  const bool blocked = BlockAllSignals(&previous);  // the writer inherits a fully blocked mask
  const int rc = pthread_create(
      &thread_, nullptr,
      [](void* self) -> void* {
        static_cast<WriterThread*>(self)->Main();
        return nullptr;
      },
      this);
  if (blocked) pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (rc != 0) {
    state_.store(kFailed, std::memory_order_release);
    Warn(std::string("cannot start the trace writer: ") + std::strerror(rc) + "; recording stops");
    return;
  }
  // Wait (at most 1 s, once per process) until the thread is past its start-up, so that a fork()
  // right after the first event never copies a thread caught inside its runtime's start-up
  // allocations (allocators without fork handlers, e.g. a sanitizer's).
  for (int i = 0; i < 10000 && !started_.load(std::memory_order_acquire); ++i) {
    timespec t{0, 100'000};
    ::nanosleep(&t, nullptr);
  }
}

void WriterThread::Main() {
  prctl(PR_SET_NAME, "fp8audit-writer", 0, 0, 0);
  tid_.store(CurrentTid(), std::memory_order_release);
  if (pthread_getcpuclockid(pthread_self(), &cpu_clock_) == 0) {
    cpu_clock_set_.store(true, std::memory_order_release);
  }
  started_.store(true, std::memory_order_release);
  TraceWriter* writer = nullptr;
  {
    std::lock_guard<std::mutex> lock(cycle_mu_);
    // Never freed: a forked child abandons it without touching it.
    writer = new TraceWriter(source_);
    writer_ = writer;
    if (!writer->Open()) {
      state_.store(kFailed, std::memory_order_release);
      return;
    }
  }
  for (;;) {
    const int exec = exec_.load(std::memory_order_acquire);
    const bool sealed = exec == kExecSealed;
    if (sealed || (!stop_.load(std::memory_order_acquire) && exec == kExecNone &&
                   flush_request_.load(std::memory_order_acquire) ==
                       flush_done_.load(std::memory_order_relaxed))) {
      wake_.Wait(static_cast<int>(kFlushPeriodMs));
    }
    if (exec == kExecSealing || exec == kExecUnsealing) {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      if (exec == kExecSealing) {
        writer->Seal();
      } else {
        writer->Unseal();
      }
      exec_.store(exec == kExecSealing ? kExecSealed : kExecNone, std::memory_order_release);
      continue;
    }
    const bool stop = stop_.load(std::memory_order_acquire);
    const uint32_t request = flush_request_.load(std::memory_order_acquire);
    const bool requested = request != flush_done_.load(std::memory_order_relaxed);
    if (sealed && !stop) {
      // Waiting for the exec: the trace ends with its footer; a flush asked for has nothing to do.
      if (requested) flush_done_.store(request, std::memory_order_release);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      if (sealed) {
        writer->Unseal();  // the process ends without the exec having happened
        exec_.store(kExecNone, std::memory_order_release);
      }
      writer->Cycle(stop || requested, stop);
      cycles_.fetch_add(1, std::memory_order_relaxed);
      ReportDrops(*writer);
    }
    if (!stop && writer->fail_fast_now()) {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      writer->Cycle(true, true);
      Warn(writer->live().first_failure() + "; ending the job (--fail-fast)");
      ::_exit(3);
    }
    if (requested) flush_done_.store(request, std::memory_order_release);
    if (stop) break;
    source_.OnWriterCycle();  // a provisional CUPTI subscription ends when TE loads
  }
  const LiveCheck& live = writer->live();
  if (live.failed() && source_.config().fail_fast) {
    Warn(live.first_failure() + "; ending the job (--fail-fast)");
    fail_fast_exit_.store(true, std::memory_order_release);
  } else if (live.failed()) {
    Warn("live check: " + std::to_string(live.failing()) + " of " +
         std::to_string(live.microbatches()) + " microbatches failed, first " +
         live.first_failure() + " (trace " + writer->path() + ")");
  }
  state_.store(kStopped, std::memory_order_release);
}

void WriterThread::ReportDrops(const TraceWriter& writer) {
  if (drops_reported_) return;
  Rings& rings = source_.rings();
  const uint64_t dropped = rings.Dropped();
  if (dropped == 0) return;
  drops_reported_ = true;
  Warn("events dropped: " + std::to_string(dropped) + " so far in this process (" +
       DropCause(rings.first_drop(), rings.options()) + "); the footer of " + writer.path() +
       " counts every one and its audit is incomplete");
}

bool WriterThread::CanWaitFor(uint32_t tid) {
  return state_.load(std::memory_order_acquire) == kRunning &&
         tid != tid_.load(std::memory_order_acquire) &&
         tid != forking_tid_.load(std::memory_order_acquire);
}

uint64_t WriterThread::Progress() {
  uint64_t progress = cycles_.load(std::memory_order_relaxed);
  timespec t{};
  if (cpu_clock_set_.load(std::memory_order_acquire) && clock_gettime(cpu_clock_, &t) == 0) {
    progress += static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  }
  return progress;
}

void WriterThread::Wake() { wake_.Wake(); }

bool WriterThread::Stop() {
  if (state_.load(std::memory_order_acquire) == kRunning) {
    stop_.store(true, std::memory_order_release);
    Wake();
    pthread_join(thread_, nullptr);
  }
  state_.store(kStopped, std::memory_order_release);
  return fail_fast_exit_.load(std::memory_order_acquire);
}

void WriterThread::RequestFlushFromSignal(bool final) {
  if (state_.load(std::memory_order_acquire) != kRunning) return;
  if (CurrentTid() == tid_.load(std::memory_order_acquire)) return;  // it cannot wait for itself
  uint32_t target = 0;
  if (final) {
    stop_.store(true, std::memory_order_release);
  } else {
    target = flush_request_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  Wake();
  for (int i = 0; i < 200; ++i) {  // at most 2 s
    if (final ? state_.load(std::memory_order_acquire) != kRunning
              : flush_done_.load(std::memory_order_acquire) == target) {
      return;
    }
    timespec ten_ms{0, 10'000'000};
    ::nanosleep(&ten_ms, nullptr);
  }
}

void WriterThread::FinishBeforeImmediateExit() { RequestFlushFromSignal(true); }

bool WriterThread::SealForExec() {
  if (state_.load(std::memory_order_acquire) != kRunning ||
      CurrentTid() == tid_.load(std::memory_order_acquire)) {
    return false;
  }
  int expected = kExecNone;
  if (!exec_.compare_exchange_strong(expected, kExecSealing, std::memory_order_acq_rel)) {
    return expected == kExecSealed;  // another thread's exec sealed it
  }
  Wake();
  for (int i = 0; i < 200; ++i) {  // at most 2 s
    if (exec_.load(std::memory_order_acquire) == kExecSealed ||
        state_.load(std::memory_order_acquire) != kRunning) {
      return true;
    }
    timespec ten_ms{0, 10'000'000};
    ::nanosleep(&ten_ms, nullptr);
  }
  return true;
}

void WriterThread::UnsealAfterFailedExec() {
  int expected = kExecSealed;
  if (!exec_.compare_exchange_strong(expected, kExecUnsealing, std::memory_order_acq_rel)) {
    if (expected != kExecSealing) return;
    // Not sealed yet (the writer was slow): sealing and unsealing in turn, as asked.
    for (int i = 0; i < 200 && exec_.load(std::memory_order_acquire) == kExecSealing; ++i) {
      timespec ten_ms{0, 10'000'000};
      ::nanosleep(&ten_ms, nullptr);
    }
    expected = kExecSealed;
    if (!exec_.compare_exchange_strong(expected, kExecUnsealing, std::memory_order_acq_rel)) {
      return;
    }
  }
  Wake();
  // Wait until the writer took the footer back, so that a second exec attempt seals afresh.
  for (int i = 0; i < 200 && exec_.load(std::memory_order_acquire) == kExecUnsealing; ++i) {
    timespec ten_ms{0, 10'000'000};
    ::nanosleep(&ten_ms, nullptr);
  }
}

int WriterThread::FlushNow(std::string* path) {
  for (;;) {
    const int state = state_.load(std::memory_order_acquire);
    if (state == kNotStarted) return 0;
    if (state != kRunning || tid_.load(std::memory_order_acquire) == CurrentTid()) return -1;
    {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      // After stop_ the final cycle writes the footer: nothing may follow it. Sealed for an exec,
      // the trace ends with its footer until the exec fails.
      if (stop_.load(std::memory_order_acquire) ||
          state_.load(std::memory_order_acquire) != kRunning ||
          exec_.load(std::memory_order_acquire) != kExecNone) {
        return -1;
      }
      if (writer_ != nullptr) {
        writer_->Cycle(true, false);
        cycles_.fetch_add(1, std::memory_order_relaxed);
        *path = writer_->path();
        return 1;
      }
    }
    sched_yield();  // the thread has started and is about to open the trace (Main)
  }
}

void WriterThread::LockForFork() {
  forking_tid_.store(CurrentTid(), std::memory_order_release);  // it never waits for the writer
  cycle_mu_.lock();
  start_mu_.lock();
}

void WriterThread::UnlockAfterFork() {
  start_mu_.unlock();
  cycle_mu_.unlock();
  forking_tid_.store(0, std::memory_order_release);
}

void WriterThread::ResetInChild() {
  // The parent's writer thread does not exist here; its file stays the parent's. A new writer
  // (and file <host>.<pid>...) starts at this process's first event.
  if (writer_ != nullptr) abandoned_ = writer_;
  writer_ = nullptr;
  state_.store(kNotStarted, std::memory_order_release);
  stop_.store(false);
  flush_request_.store(0);
  flush_done_.store(0);
  fail_fast_exit_.store(false);
  started_.store(false);
  tid_.store(0);
  cpu_clock_set_.store(false);
  cycles_.store(0);
  exec_.store(kExecNone);
  drops_reported_ = false;
  if (!wake_.ReopenInChild()) state_.store(kFailed);
}

}  // namespace fp8audit::agent
