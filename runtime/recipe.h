// The DelayedScaling recipe of an FP8 autocast, and the runtime's enumerations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/fp8_format.h"

namespace fp8audit::runtime {

// Who decides which autocast exit and which module backward update the global state:
// `fixed` (per checkpoint frame, one forward and one backward update per logical microbatch) or
// `te_legacy` (Transformer Engine at commit 172bd93, duplicates included: a positive control).
enum class Ownership : uint8_t { fixed, te_legacy };

// E4M3: every tensor in E4M3. HYBRID: forward tensors E4M3, gradients E5M2.
enum class Format : uint8_t { kE4M3, kHybrid };
enum class AmaxComputeAlgo : uint8_t { kMax, kMostRecent };

struct DelayedScaling {
  static constexpr int kMinMargin = -126;
  static constexpr int kMaxMargin = 127;
  static constexpr int kMaxHistoryLen = 65536;

  int margin = 0;               // scale = fp8_max / amax / 2^margin
  int amax_history_len = 1024;  // rows of amax history, >= 1
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
  Format format = Format::kHybrid;

  // Throws std::invalid_argument naming the field when a value is out of range.
  void Validate() const;

  kernels::Fp8Format forward_format() const { return kernels::Fp8Format::kE4M3; }
  kernels::Fp8Format backward_format() const {
    return format == Format::kHybrid ? kernels::Fp8Format::kE5M2 : kernels::Fp8Format::kE4M3;
  }
  kernels::AmaxAlgo algo() const {
    return amax_compute_algo == AmaxComputeAlgo::kMax ? kernels::AmaxAlgo::kMax
                                                      : kernels::AmaxAlgo::kMostRecent;
  }
  std::string ToString() const;
  friend bool operator==(const DelayedScaling&, const DelayedScaling&) = default;
};

std::optional<Format> ParseFormat(std::string_view name);        // "e4m3" | "hybrid"
std::optional<Ownership> ParseOwnership(std::string_view name);  // "fixed" | "te-legacy" (aliases)

}  // namespace fp8audit::runtime
