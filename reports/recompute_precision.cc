#include "reports/recompute_precision.h"

#include "reports/event_text.h"

namespace fp8audit::reports {

void RecomputePrecision::Add(const v1::Event& e, const std::string& site) {
  ++recomputes_;
  if (e.fp8() == v1::FP8_MODE_UNSPECIFIED || e.forward_fp8() == v1::FP8_MODE_UNSPECIFIED ||
      e.fp8() == e.forward_fp8()) {
    return;
  }
  ++changes_;
  const bool fp8 = e.fp8() == v1::FP8_ON;
  if (!fp8) ++to_off_;
  if (kept_.size() < kKept) {
    kept_.push_back(
        {e.module().empty() ? std::string("a module") : Printable(e.module(), 64),
         e.detail().empty() ? std::string("unknown checkpoint") : Printable(e.detail(), 64),
         site.empty() ? std::string() : Printable(site, 128), fp8});
  }
}

std::string RecomputePrecision::ViolationMessage() const {
  std::string line = Plural(changes_, "module recompute", "module recomputes") + " of " +
                     std::to_string(recomputes_) + " ran in another FP8 state than the forward";
  if (to_off_ > 0) line += " (" + std::to_string(to_off_) + " with FP8 off where it was on)";
  return line;
}

std::string RecomputePrecision::Explanation() const {
  if (changes_ == 0) return {};
  std::string line =
      ViolationMessage() +
      ": harmful (the checkpoint restored torch's autocast but not Transformer Engine's FP8 "
      "autocast, so the activations saved for backward were computed in another precision than "
      "the forward's; TE's own checkpoint, or fp8audit.te's fix, recomputes in the forward's FP8 "
      "state): ";
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (i > 0) line += ", ";
    line +=
        kept_[i].module + " FP8 " + (kept_[i].fp8 ? "on" : "off") + " in " + kept_[i].checkpoint;
    if (!kept_[i].site.empty()) line += ", called at " + kept_[i].site;
  }
  if (changes_ > kept_.size()) line += ", and " + std::to_string(changes_ - kept_.size()) + " more";
  return line;
}

}  // namespace fp8audit::reports
