// The live check: the writer thread feeds every event it writes to reports::Auditor and learns of
// each closed microbatch; the first failing one ends the job under FP8AUDIT_FAIL_FAST=1.
// A microbatch that only lacks updates is judged once the process has shown an FP8 state update:
// a job with none at all (no FP8, or update kernels no pattern matches) is left to the offline
// report rather than stopped or flagged live.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agent/src/config.h"
#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"

namespace fp8audit::agent {

class LiveCheck {
 public:
  explicit LiveCheck(const Config& config);
  ~LiveCheck();
  LiveCheck(const LiveCheck&) = delete;
  LiveCheck& operator=(const LiveCheck&) = delete;

  void OnHeader(const ::fp8audit::v1::TraceHeader& header);
  void OnEvent(const ::fp8audit::v1::Event& event);
  // Closes the last microbatch (at clean shutdown).
  void Finish(const ::fp8audit::v1::TraceFooter& footer);

  bool available() const;  // false when built without the auditor
  bool failed() const { return failing_ > 0; }
  uint64_t microbatches() const { return microbatches_; }
  uint64_t failing() const { return failing_; }
  // The fail-fast line for the first failing microbatch (no trailing newline).
  const std::string& first_failure() const { return first_failure_; }

 private:
  void OnMicrobatch(const ::fp8audit::v1::MicrobatchResult& row);

  Config config_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t microbatches_ = 0;
  uint64_t failing_ = 0;
  uint64_t updates_seen_ = 0;
  std::string first_failure_;
  std::string first_excess_;
};

// "microbatch N: forward updates F (expected 1), backward updates B (expected 1): <what>" where
// <what> names the first offending update events (or the missing direction).
std::string DescribeFailure(const ::fp8audit::v1::MicrobatchResult& row,
                            const std::string& first_excess);
// A short description of one update event: kind, kernel or message (parameter list dropped),
// pass and thread.
std::string DescribeUpdate(const ::fp8audit::v1::Event& event);

}  // namespace fp8audit::agent
