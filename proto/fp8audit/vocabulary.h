// The project's words, declared once: the checkpoint kind, the FP8 recipe format and element
// type, the update probes and the --probe modes, each an enumeration with its one spelling (what
// the CLI accepts, the trace records and every report prints) and its parser. Header-only, the
// C++ standard library alone, so that every layer (kernels and the injected agent included) uses
// it without linking anything. The ownership semantics are named in state/semantics_registry.h,
// NVTX messages in nvtx_events.h beside this file.
//
// Where a Protobuf enum of common.proto or trace.proto carries the same concept, the numbers are
// the same (checked by vocabulary_check.cc), so a cast converts: vocabulary_proto.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8audit {

// ---- checkpoint kind: torch.utils.checkpoint's use_reentrant=True / False ---------------------
enum class CheckpointKind : uint8_t { kReentrant = 1, kNonReentrant = 2 };  // = v1::CheckpointKind

constexpr std::string_view CheckpointKindName(CheckpointKind k) {
  return k == CheckpointKind::kNonReentrant ? "non-reentrant" : "reentrant";
}
// "reentrant" | "non-reentrant"; "non_reentrant", the NVTX grammar's earlier spelling, is still
// read (frameworks may emit it).
constexpr std::optional<CheckpointKind> ParseCheckpointKind(std::string_view name) {
  if (name == "reentrant") return CheckpointKind::kReentrant;
  if (name == "non-reentrant" || name == "non_reentrant") return CheckpointKind::kNonReentrant;
  return std::nullopt;
}

// ---- FP8: a DelayedScaling recipe's format, and an FP8 tensor's element type ------------------
// kHybrid: E4M3 in forward, E5M2 in backward (TE's Format.HYBRID).
enum class Fp8Format : uint8_t { kE4M3 = 1, kHybrid = 2 };  // = v1::Fp8Format
enum class Fp8Type : uint8_t { kE4M3 = 0, kE5M2 = 1 };

constexpr std::string_view Fp8FormatName(Fp8Format f) {
  return f == Fp8Format::kHybrid ? "hybrid" : "e4m3";
}
// "e4m3" | "hybrid", or TE's spelling "E4M3" | "HYBRID".
constexpr std::optional<Fp8Format> ParseFp8Format(std::string_view name) {
  if (name == "e4m3" || name == "E4M3") return Fp8Format::kE4M3;
  if (name == "hybrid" || name == "HYBRID") return Fp8Format::kHybrid;
  return std::nullopt;
}
constexpr std::string_view Fp8TypeName(Fp8Type t) { return t == Fp8Type::kE5M2 ? "e5m2" : "e4m3"; }
constexpr std::optional<Fp8Type> ParseFp8Type(std::string_view name) {
  if (name == "e4m3" || name == "E4M3") return Fp8Type::kE4M3;
  if (name == "e5m2" || name == "E5M2") return Fp8Type::kE5M2;
  return std::nullopt;
}
// The element type a recipe uses for gradients (backward) or for activations and weights.
constexpr Fp8Type TypeFor(Fp8Format f, bool backward) {
  return f == Fp8Format::kHybrid && backward ? Fp8Type::kE5M2 : Fp8Type::kE4M3;
}

// ---- update probes: what the agent watches to count DelayedScaling state updates --------------
// kTeCall: calls of TE's C entry points for the update; kKernel: launches of the update kernels
// (through CUPTI's launch callbacks; its events have trace Source KERNEL); kPythonHook:
// fp8audit's hook around TE's Python update function.
enum class Probe : uint8_t { kTeCall = 0, kKernel = 1, kPythonHook = 2 };
inline constexpr Probe kProbes[] = {Probe::kTeCall, Probe::kKernel, Probe::kPythonHook};

// A set of probes, as bits.
constexpr uint32_t ProbeBit(Probe p) { return 1u << static_cast<unsigned>(p); }

constexpr std::string_view ProbeName(Probe p) {
  switch (p) {
    case Probe::kTeCall:
      return "te-call";
    case Probe::kKernel:
      return "kernel";
    case Probe::kPythonHook:
      return "python-hook";
  }
  return "?";
}
// A probe's name; "cupti", the kernel probe's earlier name, is still read (older traces).
constexpr std::optional<Probe> ParseProbe(std::string_view name) {
  for (Probe p : kProbes) {
    if (name == ProbeName(p)) return p;
  }
  if (name == "cupti") return Probe::kKernel;
  return std::nullopt;
}
// The names of the probes in `bits` (ProbeBit), in kProbes' order.
inline std::vector<std::string> ProbeNames(uint32_t bits) {
  std::vector<std::string> names;
  for (Probe p : kProbes) {
    if ((bits & ProbeBit(p)) != 0) names.emplace_back(ProbeName(p));
  }
  return names;
}

// ---- --probe: which update probes the agent may use -------------------------------------------
// kAuto: the te-call probe where TE's library can be interposed, else the kernel probe; kTeCall or
// kKernel: that probe alone; kAll: both, cross-checked.
enum class ProbeMode : uint8_t { kAuto, kTeCall, kKernel, kAll };
inline constexpr ProbeMode kProbeModes[] = {ProbeMode::kAuto, ProbeMode::kTeCall,
                                            ProbeMode::kKernel, ProbeMode::kAll};
// For --help and errors: every value --probe takes.
inline constexpr std::string_view kProbeModeNames = "auto, te-call, kernel, all";

constexpr std::string_view ProbeModeName(ProbeMode m) {
  switch (m) {
    case ProbeMode::kAuto:
      return "auto";
    case ProbeMode::kTeCall:
      return "te-call";
    case ProbeMode::kKernel:
      return "kernel";
    case ProbeMode::kAll:
      return "all";
  }
  return "?";
}
// A --probe value; "" reads as auto, and the earlier spellings "te" and "cupti" are still read
// (existing job scripts).
constexpr std::optional<ProbeMode> ParseProbeMode(std::string_view name) {
  if (name.empty()) return ProbeMode::kAuto;
  for (ProbeMode m : kProbeModes) {
    if (name == ProbeModeName(m)) return m;
  }
  if (name == "te") return ProbeMode::kTeCall;
  if (name == "cupti") return ProbeMode::kKernel;
  return std::nullopt;
}
// Whether `mode` lets probe `p` count updates: the kernel probe in every mode but te-call (under
// auto only where the te-call probe cannot see TE: agent/src/probe_control.h), the te-call and
// python-hook probes in every mode but kernel (`fp8audit run --probe kernel` does not arm the
// Python hook's counting; the te-call probe stands in when CUPTI cannot be had).
constexpr bool ProbeModeUses(ProbeMode mode, Probe p) {
  return p == Probe::kKernel ? mode != ProbeMode::kTeCall : mode != ProbeMode::kKernel;
}

// ---- why a program a process of the job started runs without the agent --------------------------
// The first word of a CHILD_WITHOUT_AGENT fact (trace.proto). Environment: the environment handed
// to the exec names no agent; privileged: a set-user-ID or set-group-ID program.
inline constexpr std::string_view kChildWithoutAgentEnvironment = "environment";
inline constexpr std::string_view kChildWithoutAgentPrivileged = "privileged";

}  // namespace fp8audit
