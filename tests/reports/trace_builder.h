// Builds synthetic traces for tests: events with advancing timestamps, fed to an Auditor or
// written as a .fp8trace file through the real writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/trace_io.h"
#include "reports/auditor.h"

namespace fp8audit::testing {

namespace v1 = ::fp8audit::v1;

class TraceBuilder {
 public:
  static constexpr uint64_t kMainThread = 4242;
  static constexpr uint64_t kAutogradThread = 4343;
  static constexpr const char* kUpdateKernel =
      "transformer_engine::delayed_scaling_recipe::kernel_bulk";

  explicit TraceBuilder(int32_t rank = -1, uint32_t pid = 1000, const std::string& markers = "") {
    v1::TraceRecord r;
    auto* h = r.mutable_header();
    h->set_schema_version(1);
    h->set_host("testhost");
    h->set_pid(pid);
    h->set_rank(rank);
    h->set_markers(markers);
    h->add_command("python");
    h->add_command("train.py");
    records_.push_back(r);
  }

  v1::TraceHeader* header() { return records_.front().mutable_header(); }

  // Appends an event of `kind`; returns it for further fields.
  v1::Event* Add(v1::EventKind kind, uint64_t thread = kMainThread) {
    v1::TraceRecord r;
    auto* e = r.mutable_event();
    e->set_kind(kind);
    e->set_timestamp_ns(t_ += 250000);  // 0.25 ms apart
    e->set_thread_id(thread);
    e->set_source(v1::RUNTIME);
    records_.push_back(r);
    return records_.back().mutable_event();
  }

  // Moves the clock on by `ns` (the next event comes that much later).
  TraceBuilder& Wait(uint64_t ns) {
    t_ += ns;
    return *this;
  }
  TraceBuilder& Begin() {
    auto* e = Add(v1::MICROBATCH_BEGIN);
    e->set_source(v1::NVTX);
    e->set_detail("fp8audit.microbatch");
    return *this;
  }
  TraceBuilder& End() {
    Add(v1::MICROBATCH_END)->set_source(v1::NVTX);
    return *this;
  }
  TraceBuilder& Step() {
    Add(v1::STEP);
    return *this;
  }
  TraceBuilder& BackwardBegin() {
    Add(v1::BACKWARD_BEGIN, kAutogradThread);
    return *this;
  }
  TraceBuilder& BackwardEnd() {
    Add(v1::BACKWARD_END, kMainThread);
    return *this;
  }
  TraceBuilder& Update(v1::EventKind kind, uint64_t count = 0, uint64_t thread = kMainThread) {
    auto* e = Add(kind, thread);
    e->set_source(v1::KERNEL);
    e->set_detail(kUpdateKernel);
    e->set_count(count);
    return *this;
  }
  TraceBuilder& Forward(uint64_t count = 0) { return Update(v1::UPDATE_FORWARD, count); }
  TraceBuilder& Backward(uint64_t count = 0) {
    return Update(v1::UPDATE_BACKWARD, count, kAutogradThread);
  }
  TraceBuilder& CheckpointEnter(uint64_t frame, uint32_t phase,
                                v1::CheckpointKind kind = v1::REENTRANT,
                                uint64_t thread = kMainThread) {
    auto* e = Add(v1::CHECKPOINT_ENTER, thread);
    e->set_frame(frame);
    e->set_checkpoint_phase(phase);
    e->set_checkpoint_kind(kind);
    return *this;
  }
  TraceBuilder& CheckpointExit(uint64_t frame, uint64_t thread = kMainThread) {
    Add(v1::CHECKPOINT_EXIT, thread)->set_frame(frame);
    return *this;
  }
  TraceBuilder& Autocast(bool enter, uint32_t depth_after, uint64_t thread = kMainThread) {
    Add(enter ? v1::AUTOCAST_ENTER : v1::AUTOCAST_EXIT, thread)->set_autocast_depth(depth_after);
    return *this;
  }
  TraceBuilder& Module(bool forward, const std::string& name, uint64_t thread = kMainThread) {
    auto* e = Add(forward ? v1::MODULE_FORWARD : v1::MODULE_BACKWARD, thread);
    e->set_module(name);
    e->set_pass(forward ? v1::FORWARD : v1::BACKWARD);
    return *this;
  }
  // A training microbatch without markers: forward update, then backward with its update.
  TraceBuilder& PlainMicrobatch(int forward = 1, int backward = 1) {
    Autocast(true, 1);
    Module(true, "fc1");
    for (int i = 0; i < forward; ++i) Forward();
    Autocast(false, 0);
    BackwardBegin();
    for (int i = 0; i < backward; ++i) Backward();
    return BackwardEnd();
  }
  // The same, inside microbatch markers.
  TraceBuilder& MarkedMicrobatch(int forward = 1, int backward = 1) {
    Begin();
    PlainMicrobatch(forward, backward);
    return End();
  }
  TraceBuilder& Footer(uint64_t dropped = 0) {
    v1::TraceRecord r;
    r.mutable_footer()->set_events(records_.size() - 1);
    r.mutable_footer()->set_dropped(dropped);
    records_.push_back(r);
    return *this;
  }

  const std::vector<v1::TraceRecord>& records() const { return records_; }

  // Feeds every record, then Finish().
  void Feed(reports::Auditor* auditor) const {
    for (const auto& r : records_) auditor->OnRecord(r);
    auditor->Finish();
  }
  v1::RankReport Audit(reports::Expectation expect = {}) const {
    reports::Auditor auditor(expect);
    Feed(&auditor);
    return auditor.report();
  }

  std::string Bytes() const {
    std::string out;
    for (const auto& r : records_) AppendRecord(r, &out);
    return out;
  }
  // Writes the trace through TraceFileWriter.
  bool Write(const std::string& path) const {
    std::string error;
    auto writer = TraceFileWriter::Create(path, &error);
    if (writer == nullptr) return false;
    for (const auto& r : records_) {
      if (!writer->Write(r)) return false;
    }
    return true;
  }

 private:
  std::vector<v1::TraceRecord> records_;
  uint64_t t_ = 1000000000;
};

}  // namespace fp8audit::testing
