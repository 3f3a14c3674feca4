// Enumerations of the ownership model, with their names as the CLI and reports spell them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8audit::state {

// kFixed: the corrected ownership. kTeLegacy: Transformer Engine at commit 172bd93 (named
// "te-172bd93"; "te-legacy" and "te-2.19" are accepted as aliases), which is also the 2.19
// release where the model looks (state/SEMANTICS.md). kTe220: the Transformer Engine 2.20 release
// (read from 2.20.2's source): 172bd93 plus the checkpoint changes that release carries.
enum class Semantics : uint8_t { kFixed, kTeLegacy, kTe220 };
enum class CheckpointKind : uint8_t { kReentrant, kNonReentrant };
// kLayerNormMlpCheckpoint: a LayerNormMLP built with checkpoint=True (its own recompute).
// kGroupedLinear: te.GroupedLinear. kOpsFuser: a te.ops fuser (te.LayerNorm, te.RMSNorm,
// te.ops.Sequential), which reads the first-module flag whether or not FP8 is on.
enum class ModuleKind : uint8_t {
  kLinear,
  kLayerNormLinear,
  kLayerNormMlp,
  kLayerNormMlpCheckpoint,
  kGroupedLinear,
  kOpsFuser
};

constexpr std::string_view SemanticsName(Semantics s) {
  switch (s) {
    case Semantics::kFixed:
      return "fixed";
    case Semantics::kTeLegacy:
      return "te-172bd93";
    case Semantics::kTe220:
      return "te-2.20";
  }
  return "fixed";
}
constexpr std::optional<Semantics> ParseSemantics(std::string_view name) {
  if (name == "fixed") return Semantics::kFixed;
  if (name == "te-172bd93" || name == "te-legacy" || name == "te-2.19") {
    return Semantics::kTeLegacy;
  }
  if (name == "te-2.20") return Semantics::kTe220;
  return std::nullopt;
}
// Every name ParseSemantics accepts, for --help and error messages.
inline constexpr std::string_view kSemanticsNames =
    "fixed, te-2.20, te-172bd93 (aliases te-2.19, te-legacy)";

// The semantics that model a Transformer Engine release, from its version string as
// transformer_engine.__version__ spells it ("2.20.2", "2.20.0.dev0+abc"); nullopt when no
// semantics was read from that release.
constexpr std::optional<Semantics> SemanticsForTeVersion(std::string_view version) {
  if (version.substr(0, 5) == "2.20." || version == "2.20") return Semantics::kTe220;
  // 2.19.0 differs from 2.20.2 exactly where kTe220 differs from kTeLegacy (SEMANTICS.md).
  if (version.substr(0, 5) == "2.19." || version == "2.19") return Semantics::kTeLegacy;
  return std::nullopt;
}

constexpr std::string_view CheckpointKindName(CheckpointKind k) {
  return k == CheckpointKind::kReentrant ? "reentrant" : "non-reentrant";
}

}  // namespace fp8audit::state
