// Conversions between vocabulary.h's enumerations and the Protobuf enums of the same concepts
// (their numbers are the same: vocabulary_check.cc). For code that already links Protobuf.
#pragma once

#include "fp8audit/common.pb.h"
#include "fp8audit/trace.pb.h"
#include "fp8audit/vocabulary.h"

namespace fp8audit {

// UNSPECIFIED reads as REENTRANT (common.proto).
constexpr CheckpointKind FromProto(v1::CheckpointKind k) {
  return k == v1::NON_REENTRANT ? CheckpointKind::kNonReentrant : CheckpointKind::kReentrant;
}
constexpr v1::CheckpointKind ToProto(CheckpointKind k) {
  return static_cast<v1::CheckpointKind>(static_cast<int>(k));
}
// UNSPECIFIED reads as HYBRID (common.proto).
constexpr Fp8Format FromProto(v1::Fp8Format f) {
  return f == v1::E4M3 ? Fp8Format::kE4M3 : Fp8Format::kHybrid;
}
constexpr v1::Fp8Format ToProto(Fp8Format f) {
  return static_cast<v1::Fp8Format>(static_cast<int>(f));
}
// The trace Source of a probe's update events.
constexpr v1::Source SourceOf(Probe p) {
  switch (p) {
    case Probe::kTeCall:
      return v1::TE_CALL;
    case Probe::kKernel:
      return v1::KERNEL;
    case Probe::kPythonHook:
      return v1::PYTHON_HOOK;
  }
  return v1::SOURCE_UNSPECIFIED;
}
// The probe whose events have this Source; nullopt for sources that are no probe (NVTX, MODEL,
// RUNTIME).
constexpr std::optional<Probe> ProbeOf(v1::Source s) {
  for (Probe p : kProbes) {
    if (SourceOf(p) == s) return p;
  }
  return std::nullopt;
}

}  // namespace fp8audit
