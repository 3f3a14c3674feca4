// ThreadState: what the probes keep per thread (owned by the thread itself), beside its ring.
#pragma once

#include <cstddef>
#include <cstdint>

#include "agent/src/raw_event.h"
#include "agent/src/rings.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

enum class Role : uint8_t { kUndecided, kTraining, kAutograd, kOther };

inline constexpr size_t kCacheSize = 512;  // kernel functions cached per thread (power of two)
inline constexpr int kMaxDomainStacks = 8;
inline constexpr int kMaxHookRanges = 4;

struct ThreadState : ThreadRing {
  Role role = Role::kUndecided;
  struct RangeStack {
    const void* domain = nullptr;
    uint32_t depth = 0;
    uint64_t microbatch_bits = 0;  // bit d: the range at depth d is a microbatch range
  };
  RangeStack stacks[kMaxDomainStacks];
  int nstacks = 0;
  struct CacheEntry {
    uintptr_t key = 0;
    const FunctionInfo* info = nullptr;
  };
  CacheEntry cache[kCacheSize];
  uint64_t cache_epoch = 0;
  // Launches on this thread, and the last chunked update launch that filled a whole chunk (its
  // launch number, function, scaled_max and stream): the next launch may continue that update.
  uint64_t launch_seq = 0;
  uint64_t full_chunk_seq = 0;
  const FunctionInfo* full_chunk_fn = nullptr;
  ScaledMax full_chunk_scaled_max = ScaledMax::kNotRead;
  const void* full_chunk_stream = nullptr;
  // TE update calls in progress on this thread (te_probe.h): kernel updates launched inside one are
  // cross-checks of the call.
  uint32_t te_call_depth = 0;
  // Updates recorded as counted on this thread (TE calls, kernel updates outside a TE call): a
  // Python-hook update range in which any were recorded defers to them (hook_probe.h).
  uint64_t counted_updates = 0;
  // Open Python-hook update ranges on this thread, innermost last.
  struct HookRange {
    const void* domain = nullptr;
    uint32_t level = 0;                 // its depth in the domain's range stack
    RuleEvent rule = RuleEvent::kNone;  // kUpdateForward / kUpdateBackward / kUpdate
    uint32_t count = 0;                 // updates the hook announced
    uint32_t unfused = 0;               // of which TE runs without its C entry point
    uint64_t counted_at_open = 0;       // counted_updates when the range opened
    uint8_t text_len = 0;
    char text[kRawTextBytes - 1] = {};
  };
  HookRange hook_ranges[kMaxHookRanges];
  int nhook = 0;

  const FunctionInfo* CacheLookup(uintptr_t key) const {
    const CacheEntry& e = cache[Slot(key)];
    return e.key == key ? e.info : nullptr;
  }
  void CacheInsert(uintptr_t key, const FunctionInfo* info) { cache[Slot(key)] = {key, info}; }
  static size_t Slot(uintptr_t key) {
    return static_cast<size_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 40) &
           (kCacheSize - 1);
  }
};

}  // namespace fp8audit::agent
