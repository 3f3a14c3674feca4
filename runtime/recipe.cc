#include "runtime/recipe.h"

#include <cctype>
#include <stdexcept>

namespace fp8audit::runtime {

namespace {

// TE's spelling of a recipe format (Format.HYBRID, Format.E4M3): the vocabulary's name in capitals.
std::string TeFormatName(Fp8Format format) {
  std::string name(Fp8FormatName(format));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

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
  if (amax_compute_algo != kernels::AmaxAlgo::kMax &&
      amax_compute_algo != kernels::AmaxAlgo::kMostRecent) {
    throw std::invalid_argument(
        "DelayedScaling: argument 'amax_compute_algo' must be max or most_recent, got value " +
        std::to_string(static_cast<int>(amax_compute_algo)));
  }
  if (format != Fp8Format::kE4M3 && format != Fp8Format::kHybrid) {
    throw std::invalid_argument("DelayedScaling: argument 'format' must be " +
                                TeFormatName(Fp8Format::kE4M3) + " or " +
                                TeFormatName(Fp8Format::kHybrid) + ", got value " +
                                std::to_string(static_cast<int>(format)));
  }
}

std::string DelayedScaling::ToString() const {
  return "DelayedScaling(format=" + TeFormatName(format) + ", margin=" + std::to_string(margin) +
         ", amax_history_len=" + std::to_string(amax_history_len) + ", amax_compute_algo=" +
         (amax_compute_algo == kernels::AmaxAlgo::kMax ? "max" : "most_recent") + ")";
}

bool RuntimeImplements(state::Semantics semantics) {
  for (state::Semantics s : kRuntimeSemantics) {
    if (s == semantics) return true;
  }
  return false;
}

std::string RuntimeSemanticsNames() {
  std::string names;
  for (state::Semantics s : kRuntimeSemantics) {
    if (!names.empty()) names += ", ";
    names += state::SemanticsName(s);
    if (!state::SemanticsAliases(s).empty()) {
      names += " (aliases " + std::string(state::SemanticsAliases(s)) + ")";
    }
  }
  return names;
}

std::string NotImplementedLine(state::Semantics semantics) {
  return "semantics '" + std::string(state::SemanticsName(semantics)) +
         "' is the model's only; the runtime implements " + RuntimeSemanticsNames();
}

std::optional<state::Semantics> ParseRuntimeSemantics(std::string_view name, std::string* error) {
  const std::optional<state::Semantics> s = state::ParseSemantics(name);
  if (s && RuntimeImplements(*s)) return s;
  if (error) {
    *error = s ? NotImplementedLine(*s)
               : "unknown semantics '" + std::string(name) + "'; the runtime implements " +
                     RuntimeSemanticsNames();
  }
  return std::nullopt;
}

}  // namespace fp8audit::runtime
