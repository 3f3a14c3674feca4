#include "reports/frozen_modules.h"

#include <utility>

#include "reports/event_text.h"

namespace fp8audit::reports {

bool FrozenModules::First(std::string_view module) {
  const std::string name = TruncateUtf8(module, kMaxStoredString);
  if (seen_.count(name) > 0) return false;
  if (seen_.size() < kRemembered) seen_.insert(name);
  ++modules_;
  return true;
}

std::string FrozenScaleCause(std::string_view module) {
  return (module.empty() ? std::string("an unnamed module") : Printable(module, 128)) +
         ": its DelayedScaling scales are not among those TE updates (the module's FP8 state was "
         "made again after TE registered it, e.g. a switch to another recipe and back): they stay "
         "as they are for the rest of the run";
}

v1::Violation FrozenScaleViolation(std::string_view module, uint32_t microbatch,
                                   const std::string& label) {
  v1::Violation v;
  v.set_kind(v1::Violation::FROZEN_SCALE);
  v.set_microbatch(microbatch);
  v.set_cause(FrozenScaleCause(module));
  v.set_message(label + v.cause());
  return v;
}

std::string FrozenScalesNote(uint64_t modules) {
  if (modules == 0) return {};
  return "frozen scales: " + Plural(modules, "module", "modules") +
         " whose DelayedScaling scales TE's update never reaches";
}

}  // namespace fp8audit::reports
