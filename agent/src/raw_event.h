// What the probes record on the hot path: fixed-size, trivially copyable events that the writer
// thread turns into fp8audit.v1.Event records.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fp8audit/patterns.h"

namespace fp8audit::agent {

// One kernel function, classified once at its first launch and never freed.
struct FunctionInfo {
  std::string name;                    // demangled
  RuleEvent event = RuleEvent::kNone;  // kNone: not a state update
  int scaled_max_param = -1;           // float parameter to read, -1 none
  // Transformer Engine's kernel_bulk: one update of many tensors is split into back-to-back
  // launches of full chunks (KernelClassifier::IsFullUpdateChunk), counted once.
  bool chunked = false;
  // Its offset in a packed argument buffer (launches with `extra`): -2 not asked yet, -1 unknown.
  mutable std::atomic<int64_t> scaled_max_offset{-2};
};

enum class RawKind : uint8_t {
  kMicrobatchBegin,
  kMicrobatchEnd,
  kStep,
  kBackwardBegin,
  kBackwardEnd,
  kKernelUpdate,       // fn, rule event, scaled_max
  kStructured,         // text: a message of the fp8audit NVTX domain
  kKernelCrossCheck,   // as kKernelUpdate, launched inside a TE update call the TE-call probe
                       // counted
  kTeCall,             // fn: the entry point; scaled_max: from fp8_dtype; Tensors(): tensor count
  kPythonUpdate,       // rule: kUpdateForward/kUpdateBackward; count; text: the hook's message
  kPythonCrossCheck,   // as kPythonUpdate, for updates a TE-call or kernel probe counted
  kTeVersion,          // text: the mark ("fp8audit.te te=<version>")
  kTePatched,          // text: the mark ("fp8audit.patch te=<version> semantics=<s>")
  kProbes,             // count: the active probes (ProbeBits, probe_control.h); text: why
  kRecompute,          // text: the mark ("fp8audit.te.recompute module=<m> fp8=<0|1> ...")
  kFixLost,            // text: the mark ("fp8audit.te.lost pass=backward reason=<r>")
  kHookAbsent,         // text: why (a Python process called TE without the hook's TE mark)
  kChildWithoutAgent,  // text: "<why> <pid> <path>" (unaudited_children.h)
  kCallSite,           // text: the mark ("fp8audit.te.site site=<path>:<line> in <function>")
  kRecipe,             // text: the mark ("fp8audit.te.recipe recipe=<class>")
  kWeightRefresh,      // text: the mark ("fp8audit.te.refresh module=<m> scale=<s> ...")
  kFrozenScale,        // text: the mark ("fp8audit.te.frozen module=<m>")
  kBackwardScope,      // text: the mark ("fp8audit.te.scope at=enter|exit")
  kHookUnchecked,      // text: the mark ("fp8audit.te.unchecked check=<c> reason=<r>")
};

// Updates whose direction comes from scaled_max or the pass (kernel launches and TE calls).
inline constexpr bool IsDtypeUpdateKind(RawKind k) {
  return k == RawKind::kKernelUpdate || k == RawKind::kKernelCrossCheck || k == RawKind::kTeCall;
}

// Pass values as in fp8audit.v1.Pass.
inline constexpr uint8_t kPassUnspecified = 0;
inline constexpr uint8_t kPassForward = 1;
inline constexpr uint8_t kPassBackward = 2;

inline constexpr size_t kRawTextBytes = 120;

struct RawEvent {
  uint64_t ts_ns = 0;     // CLOCK_MONOTONIC
  uint64_t launches = 0;  // kernel launches counted in the process when recorded
  uint64_t count = 1;     // multiplicity
  const FunctionInfo* fn = nullptr;
  uint32_t tid = 0;
  RawKind kind = RawKind::kStep;
  uint8_t pass = kPassUnspecified;
  RuleEvent rule = RuleEvent::kNone;
  ScaledMax scaled_max = ScaledMax::kNotRead;
  uint8_t text_len = 0;
  char text[kRawTextBytes - 1] = {};

  // Keeps what fits; a cut never splits a UTF-8 sequence (it ends before the lead byte).
  void SetText(std::string_view s) {
    size_t n = s.size() < sizeof(text) ? s.size() : sizeof(text);
    if (n < s.size()) {
      size_t back = 0;
      while (back < 3 && back < n && (static_cast<unsigned char>(s[n - back]) & 0xC0) == 0x80) {
        ++back;
      }
      if (back < n && (static_cast<unsigned char>(s[n - back]) & 0xC0) == 0xC0) n -= back;
    }
    text_len = static_cast<uint8_t>(n);
    std::memcpy(text, s.data(), text_len);
  }
  std::string_view Text() const { return std::string_view(text, text_len); }

  // kTeCall events carry the call's tensor count in place of a text (4 bytes, host order).
  void SetTensors(uint32_t n) {
    std::memcpy(text, &n, sizeof(n));
    text_len = 0;
  }
  uint32_t Tensors() const {
    uint32_t n = 0;
    std::memcpy(&n, text, sizeof(n));
    return n;
  }
};

}  // namespace fp8audit::agent
