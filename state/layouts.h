// Generated checkpointing layouts: L layers of K Linear modules inside one DelayedScaling autocast,
// checkpointed not at all, reentrant or non-reentrant, as one segment, one segment per layer, or
// nested (one checkpoint around the whole stack, inside which the first layer runs in its own
// checkpoint and the rest run directly).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "fp8audit/scenario.pb.h"

namespace fp8audit::state {

enum class CheckpointMode : uint8_t { kNone, kReentrant, kNonReentrant };
enum class Segments : uint8_t { kSingle, kPerLayer, kNested };

struct LayoutSpec {
  uint32_t layers = 3;
  uint32_t linears_per_layer = 1;
  CheckpointMode checkpoint = CheckpointMode::kNone;
  Segments segments = Segments::kPerLayer;
  bool eval = false;  // every module in eval mode
  bool backward_inside_autocast = false;
  uint32_t microbatches = 1;
  ::fp8audit::v1::Fp8Format format = ::fp8audit::v1::HYBRID;
};

std::optional<CheckpointMode> ParseCheckpointMode(std::string_view s);
std::optional<Segments> ParseSegments(std::string_view s);

::fp8audit::v1::Scenario MakeLayout(const LayoutSpec& spec);

}  // namespace fp8audit::state
