// Modules whose DelayedScaling scales never move (FROZEN_SCALE events of the Python hook): a
// Transformer Engine module ran a forward in FP8 under DelayedScaling with an FP8 state that is
// not the one TE registered in its global buffers (the job switched the module to another recipe
// and back: TE made a new state and keeps the first registration), so TE's update never reaches
// its scales and they stay as they are for the rest of the run. No update count shows it. The
// hook sends one mark per module and state; the audit makes one violation (FROZEN_SCALE) per
// module in the run, failing the microbatch the module's first mark falls in (the Segmenter says
// which: segmentation.h), and counts the modules (Recording.frozen_scales). The words here are
// what every renderer shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The modules with a frozen scale so far in the run.
class FrozenModules {
 public:
  static constexpr size_t kRemembered = 4096;  // modules told apart; beyond, every mark is new

  // Whether `module` (its name as the mark gave it, "" for none) had no frozen scale before in the
  // run; counts it when new.
  bool First(std::string_view module);
  uint64_t modules() const { return modules_; }

 private:
  std::unordered_set<std::string> seen_;
  uint64_t modules_ = 0;
};

// The violation's cause: "Linear#1: its DelayedScaling scales are not among those TE updates
// (...): they stay as they are for the rest of the run"; a mark without a module name says "an
// unnamed module".
std::string FrozenScaleCause(std::string_view module);
// The violation, in `microbatch`, its message `label` then the cause ("microbatch 3 (step 1): ").
v1::Violation FrozenScaleViolation(std::string_view module, uint32_t microbatch,
                                   const std::string& label);
// The recording's note on the run's modules with frozen scales: "frozen scales: 2 modules whose
// DelayedScaling scales TE's update never reaches"; empty where `modules` is 0.
std::string FrozenScalesNote(uint64_t modules);

}  // namespace fp8audit::reports
