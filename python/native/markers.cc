// libfp8audit_markers.so: NVTX markers for fp8audit's Python API (fp8audit.microbatch(),
// fp8audit.step(), fp8audit.ops' update events), loaded with ctypes. Built with the NVTX3 headers
// alone, it needs no CUDA and no torch: under `fp8audit run` NVTX routes its calls to the agent
// (NVTX_INJECTION64_PATH), elsewhere each call is a no-op. Only the fp8audit_markers_* symbols
// are exported (C ABI; ABI version fp8audit_markers_abi()).
#include <cstdint>

#include "fp8audit/nvtx_events.h"

namespace ev = fp8audit::nvtx;

#define FP8AUDIT_MARKERS_API extern "C" __attribute__((visibility("default")))

FP8AUDIT_MARKERS_API int fp8audit_markers_abi() { return 3; }

// A mark of the Python hook ("fp8audit.te te=...", ...; ABI 3), where torch's NVTX is not there
// to send it (a CPU torch): the agent takes the hook's marks from any domain.
FP8AUDIT_MARKERS_API void fp8audit_markers_mark(const char* text) {
  if (text != nullptr) ev::Mark(text);
}

// The logical microbatch range (fp8audit.microbatch, in the fp8audit domain) on this thread.
FP8AUDIT_MARKERS_API void fp8audit_markers_microbatch_begin() { ev::MicrobatchBegin(); }
FP8AUDIT_MARKERS_API void fp8audit_markers_microbatch_end() { ev::MicrobatchEnd(); }
// The same range naming the logical microbatch `id` ("fp8audit.microbatch id=<id>"; ABI 2).
FP8AUDIT_MARKERS_API void fp8audit_markers_microbatch_begin_id(uint64_t id) {
  ev::MicrobatchBegin(id);
}

// The optimizer-step mark (fp8audit.step).
FP8AUDIT_MARKERS_API void fp8audit_markers_step() { ev::Step(); }

// The grammar's names Python spells too (python/fp8audit/_markers.py, hook/): 0 the microbatch
// range, 1 the step mark, 2-11 the Python hook's TE mark, update range, recompute mark, the fix's
// lost-update mark, the call-site mark, the recipe mark, the weight-refresh mark, the
// frozen-scale mark, the backward-scope mark and the unchecked mark; null past
// them. For checking that both languages spell them alike.
FP8AUDIT_MARKERS_API const char* fp8audit_markers_name(int which) {
  static const char* const kNames[] = {
      ev::kMicrobatchRange,   ev::kStepMark,       ev::kHookTeMark,    ev::kHookUpdateRange,
      ev::kHookRecomputeMark, ev::kHookLostMark,   ev::kHookSiteMark,  ev::kHookRecipeMark,
      ev::kHookRefreshMark,   ev::kHookFrozenMark, ev::kHookScopeMark, ev::kHookUncheckedMark};
  constexpr int n = sizeof(kNames) / sizeof(kNames[0]);
  return which >= 0 && which < n ? kNames[which] : nullptr;
}

// A global FP8 state update the agent cannot see as a kernel launch (e.g. one computed on the
// CPU): direction +1 forward, -1 backward, 0 not known; count >= 1 updates.
FP8AUDIT_MARKERS_API void fp8audit_markers_update(int direction, uint64_t count) {
  if (count == 0) return;
  ev::Mark(ev::FormatUpdate(direction > 0 ? 1 : direction < 0 ? -1 : 0, count));
}
