#include "runtime/recipe.h"

#include <stdexcept>

#include "state/semantics.h"

namespace fp8audit::runtime {

void DelayedScaling::Validate() const {
  if (margin < kMinMargin || margin > kMaxMargin) {
    throw std::invalid_argument("DelayedScaling: argument 'margin' must lie in [" +
                                std::to_string(kMinMargin) + ", " + std::to_string(kMaxMargin) +
                                "], got " + std::to_string(margin));
  }
  if (amax_history_len < 1 || amax_history_len > kMaxHistoryLen) {
    throw std::invalid_argument("DelayedScaling: argument 'amax_history_len' must lie in [1, " +
                                std::to_string(kMaxHistoryLen) + "], got " +
                                std::to_string(amax_history_len));
  }
  if (amax_compute_algo != AmaxComputeAlgo::kMax &&
      amax_compute_algo != AmaxComputeAlgo::kMostRecent) {
    throw std::invalid_argument(
        "DelayedScaling: argument 'amax_compute_algo' must be max or most_recent, got value " +
        std::to_string(static_cast<int>(amax_compute_algo)));
  }
  if (format != Format::kE4M3 && format != Format::kHybrid) {
    throw std::invalid_argument(
        "DelayedScaling: argument 'format' must be E4M3 or HYBRID, got value " +
        std::to_string(static_cast<int>(format)));
  }
}

std::string DelayedScaling::ToString() const {
  return std::string("DelayedScaling(format=") + (format == Format::kHybrid ? "HYBRID" : "E4M3") +
         ", margin=" + std::to_string(margin) +
         ", amax_history_len=" + std::to_string(amax_history_len) + ", amax_compute_algo=" +
         (amax_compute_algo == AmaxComputeAlgo::kMax ? "max" : "most_recent") + ")";
}

std::optional<Format> ParseFormat(std::string_view name) {
  if (name == "e4m3" || name == "E4M3") return Format::kE4M3;
  if (name == "hybrid" || name == "HYBRID") return Format::kHybrid;
  return std::nullopt;
}

std::optional<Ownership> ParseOwnership(std::string_view name) {
  // The runtime implements two of the model's semantics; their names (and aliases) are the
  // registry's (state/semantics_registry.h), plus this runtime's older spelling "te_legacy".
  const auto s = state::ParseSemantics(name == "te_legacy" ? "te-legacy" : name);
  if (s == state::Semantics::kFixed) return Ownership::fixed;
  if (s == state::Semantics::kTeLegacy) return Ownership::te_legacy;
  return std::nullopt;
}

}  // namespace fp8audit::runtime
