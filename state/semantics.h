// Enumerations of the ownership model, with their names as the CLI and reports spell them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8audit::state {

enum class Semantics : uint8_t { kFixed, kTeLegacy };
enum class CheckpointKind : uint8_t { kReentrant, kNonReentrant };
enum class ModuleKind : uint8_t { kLinear, kLayerNormLinear, kLayerNormMlp };

constexpr std::string_view SemanticsName(Semantics s) {
  return s == Semantics::kFixed ? "fixed" : "te-legacy";
}
constexpr std::optional<Semantics> ParseSemantics(std::string_view name) {
  if (name == "fixed") return Semantics::kFixed;
  if (name == "te-legacy") return Semantics::kTeLegacy;
  return std::nullopt;
}
constexpr std::string_view CheckpointKindName(CheckpointKind k) {
  return k == CheckpointKind::kReentrant ? "reentrant" : "non-reentrant";
}

}  // namespace fp8audit::state
