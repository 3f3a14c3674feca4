// The record sink the probe tests share: what the probes record, converted as the writer does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/pass_tracker.h"
#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"
#include "agent/src/thread_state.h"

namespace fp8audit::agent::testing {

namespace v1 = ::fp8audit::v1;

// Keeps what the probes record; "threads" are ThreadStates the test switches between.
class TestSink : public RecordSink {
 public:
  ThreadState* Thread(uint32_t tid, bool autograd = false) {
    auto ts = std::make_unique<ThreadState>();
    ts->tid = tid;
    if (autograd) ts->role = Role::kAutograd;
    threads_.push_back(std::move(ts));
    return threads_.back().get();
  }
  void Use(ThreadState* ts) { current_ = ts; }

  ThreadState* Self() override { return current_; }
  void Record(ThreadState* ts, RawEvent* e) override {
    e->tid = ts->tid;
    e->pass = pass_.PassOf(ts);
    e->ts_ns = ++clock_;
    e->launches = launches;
    events.push_back(*e);
  }
  void OnActivity(ThreadState* ts, const char* what) override {
    RawEvent boundary;
    if (pass_.OnActivity(ts, what, &boundary)) Record(ts, &boundary);
  }
  void CountLaunches(uint64_t n) override { launches += n; }
  void EnsureTrace() override { ++traces_ensured; }

  // The converted events (as the writer converts them), kinds only or whole.
  std::vector<v1::Event> Converted(FormatHint hint = FormatHint::kAuto) const {
    EventConverter c(hint);
    std::vector<v1::Event> out;
    for (const RawEvent& e : events) c.Push(e, &out);
    c.Flush(&out);
    return out;
  }
  std::vector<v1::EventKind> Kinds(FormatHint hint = FormatHint::kAuto) const {
    std::vector<v1::EventKind> kinds;
    for (const auto& e : Converted(hint)) kinds.push_back(e.kind());
    return kinds;
  }

  std::vector<RawEvent> events;
  uint64_t launches = 0;
  int traces_ensured = 0;

 private:
  std::vector<std::unique_ptr<ThreadState>> threads_;
  ThreadState* current_ = nullptr;
  PassTracker pass_;
  uint64_t clock_ = 0;
};

using K = std::vector<v1::EventKind>;

}  // namespace fp8audit::agent::testing
