// vocabulary.h's enumerations carry the numbers of common.proto's enums of the same concept, so
// that vocabulary_proto.h converts by a cast.
#include "fp8audit/vocabulary_proto.h"

namespace fp8audit {

static_assert(ToProto(CheckpointKind::kReentrant) == v1::REENTRANT);
static_assert(ToProto(CheckpointKind::kNonReentrant) == v1::NON_REENTRANT);
static_assert(FromProto(v1::CHECKPOINT_KIND_UNSPECIFIED) == CheckpointKind::kReentrant);
static_assert(ToProto(Fp8Format::kE4M3) == v1::E4M3);
static_assert(ToProto(Fp8Format::kHybrid) == v1::HYBRID);
static_assert(FromProto(v1::FP8_FORMAT_UNSPECIFIED) == Fp8Format::kHybrid);
static_assert(ProbeOf(v1::KERNEL) == Probe::kKernel && !ProbeOf(v1::NVTX));

}  // namespace fp8audit
