// Generated checkpointing layouts: L layers of K Linear modules inside one DelayedScaling autocast,
// checkpointed not at all, reentrant or non-reentrant, as one segment, one segment per layer, or
// nested (one checkpoint around the whole stack, inside which the first layer runs in its own
// checkpoint and the rest run directly).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8audit/scenario.pb.h"
#include "fp8audit/vocabulary.h"

namespace fp8audit::state {

enum class Segments : uint8_t { kSingle, kPerLayer, kNested };

struct LayoutSpec {
  uint32_t layers = 3;
  uint32_t linears_per_layer = 1;
  std::optional<CheckpointKind> checkpoint;  // nullopt: no checkpoint
  Segments segments = Segments::kPerLayer;
  bool eval = false;  // every module in eval mode
  bool backward_inside_autocast = false;
  uint32_t microbatches = 1;
  ::fp8audit::v1::Fp8Format format = ::fp8audit::v1::HYBRID;
};

// A layout's checkpoint as `fp8audit model --checkpoint` names it: "none" (nullopt) or the
// checkpoint kind's name.
inline constexpr std::string_view kNoCheckpointName = "none";
inline constexpr std::string_view kLayoutCheckpointNames[] = {
    kNoCheckpointName, CheckpointKindName(CheckpointKind::kReentrant),
    CheckpointKindName(CheckpointKind::kNonReentrant)};
constexpr std::string_view LayoutCheckpointName(std::optional<CheckpointKind> checkpoint) {
  return checkpoint ? CheckpointKindName(*checkpoint) : kNoCheckpointName;
}
// False, leaving *checkpoint as it was, for a word that is neither.
bool ParseLayoutCheckpoint(std::string_view s, std::optional<CheckpointKind>* checkpoint);
std::optional<Segments> ParseSegments(std::string_view s);

::fp8audit::v1::Scenario MakeLayout(const LayoutSpec& spec);

}  // namespace fp8audit::state
