#include "state/layouts.h"

#include <string>

#include "fp8audit/vocabulary_proto.h"

namespace fp8audit::state {

namespace v1 = ::fp8audit::v1;

bool ParseLayoutCheckpoint(std::string_view s, std::optional<CheckpointKind>* checkpoint) {
  if (s == kNoCheckpointName) {
    checkpoint->reset();
    return true;
  }
  const std::optional<CheckpointKind> kind = ParseCheckpointKind(s);
  if (!kind) return false;
  *checkpoint = kind;
  return true;
}

std::optional<Segments> ParseSegments(std::string_view s) {
  if (s == "single") return Segments::kSingle;
  if (s == "per-layer") return Segments::kPerLayer;
  if (s == "nested") return Segments::kNested;
  return std::nullopt;
}

namespace {

std::string ModuleName(uint32_t layer, uint32_t k) {
  return "layer" + std::to_string(layer) + ".linear" + std::to_string(k);
}

void AddLayer(uint32_t layer, uint32_t k_count, google::protobuf::RepeatedPtrField<v1::Op>* ops) {
  for (uint32_t k = 0; k < k_count; ++k)
    ops->Add()->mutable_call()->set_module(ModuleName(layer, k));
}

v1::Checkpoint* AddCheckpoint(CheckpointKind kind,
                              google::protobuf::RepeatedPtrField<v1::Op>* ops) {
  v1::Checkpoint* cp = ops->Add()->mutable_checkpoint();
  cp->set_kind(ToProto(kind));
  return cp;
}
const char* SegmentsName(Segments s) {
  return s == Segments::kSingle ? "single" : s == Segments::kPerLayer ? "per-layer" : "nested";
}

}  // namespace

v1::Scenario MakeLayout(const LayoutSpec& spec) {
  v1::Scenario sc;
  sc.set_schema_version(1);
  sc.set_name(std::to_string(spec.layers) + "x" + std::to_string(spec.linears_per_layer) +
              " checkpoint=" + std::string(LayoutCheckpointName(spec.checkpoint)) +
              (!spec.checkpoint ? "" : std::string(" segments=") + SegmentsName(spec.segments)) +
              (spec.eval ? " eval" : "") +
              (spec.backward_inside_autocast ? " backward=inside" : ""));
  sc.mutable_recipe()->set_kind(v1::DELAYED_SCALING);
  sc.mutable_recipe()->set_format(spec.format);
  for (uint32_t l = 0; l < spec.layers; ++l) {
    for (uint32_t k = 0; k < spec.linears_per_layer; ++k) {
      v1::ModuleDecl* m = sc.add_modules();
      m->set_name(ModuleName(l, k));
      m->set_kind(v1::LINEAR);
      m->set_eval(spec.eval);
    }
  }
  sc.set_backward(spec.backward_inside_autocast ? v1::INSIDE_AUTOCAST : v1::AFTER_AUTOCAST);
  sc.set_microbatches(spec.microbatches);
  auto* body = sc.add_program()->mutable_autocast()->mutable_body();
  if (!spec.checkpoint || spec.layers == 0) {
    for (uint32_t l = 0; l < spec.layers; ++l) AddLayer(l, spec.linears_per_layer, body);
    return sc;
  }
  switch (spec.segments) {
    case Segments::kSingle: {
      auto* cp = AddCheckpoint(*spec.checkpoint, body);
      for (uint32_t l = 0; l < spec.layers; ++l)
        AddLayer(l, spec.linears_per_layer, cp->mutable_body());
      break;
    }
    case Segments::kPerLayer:
      for (uint32_t l = 0; l < spec.layers; ++l) {
        AddLayer(l, spec.linears_per_layer, AddCheckpoint(*spec.checkpoint, body)->mutable_body());
      }
      break;
    case Segments::kNested: {
      auto* outer = AddCheckpoint(*spec.checkpoint, body);
      AddLayer(0, spec.linears_per_layer,
               AddCheckpoint(*spec.checkpoint, outer->mutable_body())->mutable_body());
      for (uint32_t l = 1; l < spec.layers; ++l) {
        AddLayer(l, spec.linears_per_layer, outer->mutable_body());
      }
      break;
    }
  }
  return sc;
}

}  // namespace fp8audit::state
