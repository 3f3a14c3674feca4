// The DelayedScaling recipe of an FP8 autocast, and the ownership semantics the runtime
// implements. The words are the project's: fp8audit::Fp8Format and Fp8Type (fp8audit/vocabulary.h),
// kernels::AmaxAlgo, state::Semantics (state/semantics.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fp8audit/vocabulary.h"
#include "kernels/fp8_format.h"
#include "state/semantics.h"

namespace fp8audit::runtime {

struct DelayedScaling {
  static constexpr int kMinMargin = -126;
  static constexpr int kMaxMargin = 127;
  static constexpr int kMaxHistoryLen = 65536;

  int margin = 0;               // scale = fp8_max / amax / 2^margin
  int amax_history_len = 1024;  // rows of amax history, >= 1
  kernels::AmaxAlgo amax_compute_algo = kernels::AmaxAlgo::kMax;
  Fp8Format format = Fp8Format::kHybrid;  // E4M3: every tensor E4M3; HYBRID: gradients E5M2

  // Throws std::invalid_argument naming the field when a value is out of range.
  void Validate() const;

  Fp8Type forward_type() const { return TypeFor(format, /*backward=*/false); }
  Fp8Type backward_type() const { return TypeFor(format, /*backward=*/true); }
  // TE's spelling: "DelayedScaling(format=HYBRID, margin=0, ...)".
  std::string ToString() const;
  friend bool operator==(const DelayedScaling&, const DelayedScaling&) = default;
};

// Who decides which autocast exit and which module backward update the global state: of the
// model's semantics (state/semantics_registry.h) the runtime implements `fixed` (per checkpoint
// frame, one forward and one backward update per logical microbatch) and `te-172bd93`
// (Transformer Engine at commit 172bd93, duplicates included: a positive control).
inline constexpr state::Semantics kRuntimeSemantics[] = {state::Semantics::kFixed,
                                                         state::Semantics::kTeLegacy};
bool RuntimeImplements(state::Semantics semantics);
// The names (aliases included) of kRuntimeSemantics, for --help and errors:
// "fixed, te-172bd93 (aliases te-2.19, te-legacy)".
std::string RuntimeSemanticsNames();
// "semantics 'te-2.20' is the model's only; the runtime implements fixed, te-172bd93 (...)".
std::string NotImplementedLine(state::Semantics semantics);
// The semantics named `name` (a name or alias of state::ParseSemantics) when the runtime
// implements it; otherwise nullopt and, with `error`, one line saying why (an unknown name, or a
// semantics only the model has) and what the runtime implements.
std::optional<state::Semantics> ParseRuntimeSemantics(std::string_view name,
                                                      std::string* error = nullptr);

}  // namespace fp8audit::runtime
