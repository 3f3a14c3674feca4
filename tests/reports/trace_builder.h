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
  static constexpr const char* kTeEntryPoint =
      "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction";

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
  // The agent's probe mode and the probes active when the trace began (header).
  TraceBuilder& Probes(const std::string& mode, const std::vector<std::string>& probes) {
    header()->set_probe_mode(mode);
    header()->clear_probes();
    for (const std::string& p : probes) header()->add_probes(p);
    return *this;
  }
  // A PROBES event: the probes active from now on, and why they changed.
  TraceBuilder& ProbesChanged(const std::vector<std::string>& probes, const std::string& why) {
    auto* e = Add(v1::PROBES);
    e->set_source(v1::SOURCE_UNSPECIFIED);
    for (const std::string& p : probes) e->add_probes(p);
    e->set_detail(why);
    return *this;
  }
  // TE_VERSION; `semantics`: the ownership TE's own code showed the hook ("te-3456").
  TraceBuilder& TeVersion(const std::string& version, const std::string& semantics = "") {
    auto* e = Add(v1::TE_VERSION);
    e->set_source(v1::PYTHON_HOOK);
    e->set_detail("fp8audit.te te=" + version +
                  (semantics.empty() ? "" : " semantics=" + semantics));
    e->set_te_version(version);
    e->set_semantics(semantics);
    return *this;
  }
  TraceBuilder& TePatched(const std::string& version, const std::string& semantics) {
    auto* e = Add(v1::TE_PATCHED);
    e->set_source(v1::PYTHON_HOOK);
    e->set_detail("fp8audit.patch te=" + version + " semantics=" + semantics);
    e->set_te_version(version);
    e->set_semantics(semantics);
    return *this;
  }
  // A TE C API update call (te-call probe), counted or seen as a cross-check.
  TraceBuilder& TeCall(v1::EventKind kind, uint64_t thread = kMainThread, uint32_t tensors = 8) {
    auto* e = Add(kind, thread);
    e->set_source(v1::TE_CALL);
    e->set_detail(kTeEntryPoint);
    e->set_tensors(tensors);
    e->set_pass(thread == kAutogradThread ? v1::BACKWARD : v1::FORWARD);
    return *this;
  }
  // An update kernel seen by the cupti probe inside a TE call that counted it (a cross-check).
  TraceBuilder& KernelCrossCheck(v1::EventKind kind, uint64_t thread = kMainThread) {
    auto* e = Add(kind, thread);
    e->set_source(v1::KERNEL);
    e->set_detail(kUpdateKernel);
    e->set_pass(thread == kAutogradThread ? v1::BACKWARD : v1::FORWARD);
    return *this;
  }
  // The Python hook's view of reduce_and_update_fp8_tensors: `count` updates (`unfused` of them
  // on TE's unfused path) as a counted update or a cross-check event (`kind`).
  TraceBuilder& Hook(v1::EventKind kind, uint64_t count, uint32_t unfused = 0,
                     uint64_t thread = kMainThread) {
    auto* e = Add(kind, thread);
    e->set_source(v1::PYTHON_HOOK);
    const bool backward = thread == kAutogradThread;
    e->set_detail(std::string("fp8audit.te.update pass=") + (backward ? "backward" : "forward") +
                  " count=" + std::to_string(count) + " unfused=" + std::to_string(unfused));
    e->set_count(count);
    e->set_pass(backward ? v1::BACKWARD : v1::FORWARD);
    return *this;
  }
  // The Python hook's MODULE_RECOMPUTE: `module` ran again in backward with FP8 `fp8`, its forward
  // with `forward_fp8`; `checkpoint` as the hook names it (on a mismatch).
  TraceBuilder& Recompute(const std::string& module, v1::Fp8Mode fp8, v1::Fp8Mode forward_fp8,
                          const std::string& checkpoint = "") {
    auto* e = Add(v1::MODULE_RECOMPUTE, kAutogradThread);
    e->set_source(v1::PYTHON_HOOK);
    e->set_module(module);
    e->set_fp8(fp8);
    e->set_forward_fp8(forward_fp8);
    e->set_detail(checkpoint);
    e->set_pass(v1::BACKWARD);
    return *this;
  }
  // The Python hook's WEIGHT_REFRESH: in a recompute, `module` re-quantized a weight into the
  // cache its forward had filled, under `scale` ("forward", "live"); `checkpoint` as the hook
  // found it on the stack.
  TraceBuilder& Refresh(const std::string& module, const std::string& scale,
                        const std::string& checkpoint = "") {
    auto* e = Add(v1::WEIGHT_REFRESH, kAutogradThread);
    e->set_source(v1::PYTHON_HOOK);
    e->set_module(module);
    e->set_context(scale);
    e->set_detail(checkpoint);
    e->set_pass(v1::BACKWARD);
    return *this;
  }
  // The Python hook's FROZEN_SCALE: `module` is about to run a forward in FP8 under DelayedScaling
  // with scales TE's update never reaches (its state is not the one TE registered).
  TraceBuilder& FrozenScale(const std::string& module, uint64_t thread = kMainThread) {
    auto* e = Add(v1::FROZEN_SCALE, thread);
    e->set_source(v1::PYTHON_HOOK);
    e->set_module(module);
    e->set_pass(v1::FORWARD);
    return *this;
  }
  // The Python hook's BACKWARD_SCOPE: TE PR #3456's quantization_backward_scope() entered
  // (`enter`) or left at its outermost level.
  TraceBuilder& Scope(bool enter, uint64_t thread = kMainThread) {
    auto* e = Add(v1::BACKWARD_SCOPE, thread);
    e->set_source(v1::PYTHON_HOOK);
    e->set_context(enter ? "enter" : "exit");
    return *this;
  }
  // The Python hook's CALL_SITE: where in the job's code its next event on `thread` happened.
  TraceBuilder& Site(const std::string& site, uint64_t thread = kMainThread) {
    auto* e = Add(v1::CALL_SITE, thread);
    e->set_source(v1::PYTHON_HOOK);
    e->set_detail(site);
    return *this;
  }
  // The Python hook's RECIPE fact: a TE module ran under a recipe of class `recipe`.
  TraceBuilder& Recipe(const std::string& recipe) {
    auto* e = Add(v1::RECIPE);
    e->set_source(v1::PYTHON_HOOK);
    e->set_detail(recipe);
    return *this;
  }
  // A training microbatch as the agent records it with every probe of a TE job: each update is
  // one TE call (counted), its kernel and the Python hook's range around it (cross-checks).
  TraceBuilder& TeMicrobatch(int forward = 1, int backward = 1) {
    const uint64_t bw = kAutogradThread;
    for (int i = 0; i < forward; ++i) {
      TeCall(v1::UPDATE_FORWARD).KernelCrossCheck(v1::CROSSCHECK_UPDATE_FORWARD);
      Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1);
    }
    BackwardBegin();
    for (int i = 0; i < backward; ++i) {
      TeCall(v1::UPDATE_BACKWARD, bw).KernelCrossCheck(v1::CROSSCHECK_UPDATE_BACKWARD, bw);
      Hook(v1::CROSSCHECK_UPDATE_BACKWARD, 1, 0, bw);
    }
    return BackwardEnd();
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
