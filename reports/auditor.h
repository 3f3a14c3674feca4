// Streaming audit of a trace: segments events into logical microbatches, counts forward and
// backward FP8 state updates in each, and judges them against the expectation. Memory is bounded
// by one microbatch's context, not by the trace length. Used offline (fp8audit report/check) and
// live inside the agent (on its writer thread, never on the launch path).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

struct Expectation {
  uint32_t forward = 1;
  uint32_t backward = 1;
};

// Segmentation, in order of precedence:
//  1. Microbatch markers (MICROBATCH_BEGIN/END, from NVTX range `fp8audit.microbatch` or the
//     runtime): an event belongs to the most recently begun microbatch.
//  2. Without markers, the agent's pass boundaries (BACKWARD_BEGIN/BACKWARD_END from launches on
//     autograd threads vs the training thread): a return from backward to forward starts the next
//     microbatch.
// STEP events close optimizer steps. UPDATE_FORWARD/UPDATE_BACKWARD/UPDATE are counted (each
// with its `count`, at least 1).
class Auditor {
 public:
  explicit Auditor(Expectation expect);

  void OnHeader(const v1::TraceHeader& header);
  void OnEvent(const v1::Event& event);
  // Closes the last microbatch and finalises totals and verdict. Call once, at the end.
  void Finish();

  // Called whenever a microbatch is closed (live check, progress).
  std::function<void(const v1::MicrobatchResult&)> on_microbatch;

  const v1::RankReport& report() const { return report_; }
  v1::RankReport* mutable_report() { return &report_; }

 private:
  Expectation expect_;
  v1::RankReport report_;
  // Implementation state lives in auditor.cc.
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace fp8audit::reports
