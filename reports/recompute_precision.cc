#include "reports/recompute_precision.h"

#include "fp8audit/nvtx_grammar.h"
#include "reports/event_text.h"

namespace fp8audit::reports {

namespace {

// The kwargs a recompute's context names, as a reader says them; empty: not a kwargs context.
std::string KwargsWords(const std::string& context) {
  if (context == nvtx::kContextFp8Output || context == nvtx::kContextFp8Grad) return context;
  if (context == nvtx::kContextFp8OutputAndGrad) {
    return std::string(nvtx::kContextFp8Output) + " and " + nvtx::kContextFp8Grad;
  }
  return {};
}

}  // namespace

void RecomputePrecision::Add(const v1::Event& e, const std::string& site) {
  ++recomputes_;
  const bool state = e.fp8() != v1::FP8_MODE_UNSPECIFIED &&
                     e.forward_fp8() != v1::FP8_MODE_UNSPECIFIED && e.fp8() != e.forward_fp8();
  const bool recipe = !state && e.context() == nvtx::kContextRecipe;
  std::string kwargs = state ? std::string() : KwargsWords(e.context());
  if (!state && !recipe && kwargs.empty()) return;
  ++changes_;
  const bool fp8 = e.fp8() == v1::FP8_ON;
  if (state && !fp8) ++to_off_;
  if (recipe) ++other_recipe_;
  if (!kwargs.empty()) ++other_kwargs_;
  if (kept_.size() < kKept) {
    kept_.push_back(
        {e.module().empty() ? std::string("a module") : Printable(e.module(), 64),
         e.detail().empty() ? std::string("unknown checkpoint") : Printable(e.detail(), 64),
         site.empty() ? std::string() : Printable(site, 128), fp8, recipe, std::move(kwargs)});
  }
}

std::string RecomputePrecision::ViolationMessage() const {
  std::string line = Plural(changes_, "module recompute", "module recomputes") + " of " +
                     std::to_string(recomputes_) + " ran in another FP8 state than the forward";
  std::string parts;
  if (to_off_ > 0) parts = std::to_string(to_off_) + " with FP8 off where it was on";
  if (other_recipe_ > 0) {
    parts += std::string(parts.empty() ? "" : "; ") + std::to_string(other_recipe_) +
             " in FP8 under another recipe";
  }
  if (other_kwargs_ > 0) {
    parts += std::string(parts.empty() ? "" : "; ") + std::to_string(other_kwargs_) +
             " in FP8 called with another fp8_output or fp8_grad";
  }
  if (!parts.empty()) line += " (" + parts + ")";
  return line;
}

std::string RecomputePrecision::Explanation() const {
  if (changes_ == 0) return {};
  std::string line = ViolationMessage() + ": harmful (";
  std::string causes;
  const auto cause = [&causes](std::string_view text) {
    causes += std::string(causes.empty() ? "" : "; ") + std::string(text);
  };
  if (other_recipe_ + other_kwargs_ < changes_) {
    cause(
        "the checkpoint restored torch's autocast but not Transformer Engine's FP8 autocast, so "
        "the activations saved for backward were computed in another precision than the "
        "forward's");
  }
  if (other_recipe_ > 0) {
    cause(
        "a recompute under another FP8 recipe (another class, or other parameters: the autocast "
        "open where backward() ran, TE issue #1568) quantized the activations saved for backward "
        "otherwise than the forward");
  }
  if (other_kwargs_ > 0) {
    cause(
        "a recompute called with another fp8_output or fp8_grad than its forward quantized the "
        "module's output or its input's gradient otherwise than the forward the backward pairs "
        "with");
  }
  line += causes;
  if (other_kwargs_ < changes_) {
    line += "; TE's own checkpoint, or fp8audit.te's fix, recomputes in the forward's FP8 state";
  }
  if (other_kwargs_ > 0) line += "; " + std::string(kKwargsRemedy);
  line += "): ";
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (i > 0) line += ", ";
    line += kept_[i].module + " FP8 " + (kept_[i].fp8 ? "on" : "off") +
            (kept_[i].other_recipe ? " under another recipe" : "") +
            (kept_[i].kwargs.empty() ? "" : " with another " + kept_[i].kwargs) + " in " +
            kept_[i].checkpoint;
    if (!kept_[i].site.empty()) line += ", called at " + kept_[i].site;
  }
  if (changes_ > kept_.size()) line += ", and " + std::to_string(changes_ - kept_.size()) + " more";
  return line;
}

}  // namespace fp8audit::reports
