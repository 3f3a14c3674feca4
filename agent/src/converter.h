// Writer-side conversion of raw probe events into fp8audit.v1.Event, in timestamp order.
//
// Direction of a kernel classified `update` (Transformer Engine's kernel_bulk/kernel):
//   scaled_max = 57344 / 2^m (E5M2)  -> UPDATE_BACKWARD (only HYBRID uses E5M2, for gradients)
//   scaled_max = 448 / 2^m (E4M3)    -> UPDATE_FORWARD under HYBRID; under E4M3-only recipes both
//                                       directions use 448 and the launching thread's pass decides
//   anything else / not readable     -> the launching thread's pass
// With FP8AUDIT_FP8_FORMAT=auto (default) the recipe is not known up front: an E4M3 update on an
// autograd thread (a checkpoint recompute under HYBRID, or a backward update under E4M3) is held
// back until the same backward pass shows an E5M2 update (HYBRID: forward) or ends without one
// (E4M3: backward). Once an E5M2 update has been seen the recipe is HYBRID for the process.
//
// Kernel names and NVTX messages are bytes: a string that is not UTF-8 is stored escaped and
// marked in escaped_fields (proto/text_escape.h).
#pragma once

#include <cstdint>
#include <vector>

#include "agent/src/config.h"
#include "agent/src/raw_event.h"
#include "fp8audit/trace.pb.h"

namespace fp8audit::agent {

class EventConverter {
 public:
  static constexpr size_t kMaxHeld = 1 << 16;
  static constexpr uint64_t kMaxHoldNs = 10'000'000'000ull;

  explicit EventConverter(FormatHint hint) : hint_(hint) {}

  // Appends the events `raw` releases (none while held back) to `out`.
  void Push(const RawEvent& raw, std::vector<::fp8audit::v1::Event>* out);
  // Releases events held longer than kMaxHoldNs before `now_ns` (direction by pass).
  void Tick(uint64_t now_ns, std::vector<::fp8audit::v1::Event>* out);
  // Releases everything held (direction by pass). Call at the end.
  void Flush(std::vector<::fp8audit::v1::Event>* out);

  size_t held() const { return held_.size(); }
  bool seen_e5m2() const { return seen_e5m2_; }
  void Reset() {
    held_.clear();
    seen_e5m2_ = false;
  }

 private:
  enum class Resolve { kNormal, kForward, kByPass };
  bool IsProvisional(const RawEvent& raw) const;
  void Release(Resolve how, std::vector<::fp8audit::v1::Event>* out);
  bool Convert(const RawEvent& raw, Resolve how, ::fp8audit::v1::Event* event) const;
  bool ConvertFields(const RawEvent& raw, Resolve how, ::fp8audit::v1::Event* event) const;

  FormatHint hint_;
  bool seen_e5m2_ = false;
  std::vector<RawEvent> held_;
};

}  // namespace fp8audit::agent
