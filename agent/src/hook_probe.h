// The python-hook probe: what fp8audit's Python hook (python/fp8audit/hook) sends as NVTX, in any
// domain (it uses torch.cuda.nvtx, the default domain); the words are fp8audit/nvtx_grammar.h's
// (kHook*, keys). The NVTX probe hands these messages here:
//   mark   "fp8audit.te te=<version>[ semantics=<s>]"     TE was imported (TE_VERSION)
//   mark   "fp8audit.patch te=<version> semantics=<s>"    fp8audit.te.patch() applied (TE_PATCHED)
//   mark   "fp8audit.te.recompute module=<m> fp8=<0|1> forward_fp8=<0|1|?>[ context=recipe]
//          [ checkpoint=<c>]"  a TE module ran again in backward (a checkpoint recompute), with FP8
//          on or off, its original forward with it on or off, both in FP8 under other recipes
//          (context=recipe) or called with another fp8_output / fp8_grad (context=fp8_output,
//          fp8_grad, fp8_output+fp8_grad) (MODULE_RECOMPUTE); keys in any order
//   mark   "fp8audit.te.refresh module=<m> scale=<forward|live>[ checkpoint=<c>]"  in backward (a
//          checkpoint recompute) a TE module re-quantized a weight into the cache its forward had
//          filled, under the forward's scale or DelayedScaling's live one (WEIGHT_REFRESH); keys in
//          any order
//   mark   "fp8audit.te.frozen module=<m>"  a TE module is about to run a forward in FP8 under
//          DelayedScaling with scales TE's update never reaches (its state is not the one TE
//          registered in its global buffers), once per module and state (FROZEN_SCALE)
//   mark   "fp8audit.te.scope at=enter|exit"  TE PR #3456's quantization_backward_scope() entered
//          or left at its outermost level (BACKWARD_SCOPE, context enter or exit)
//   mark   "fp8audit.te.unchecked check=<c> reason=<r>"  a check of the hook gave up in this
//          process (HOOK_UNCHECKED, context the check, detail the reason); keys in any order
//   range  "fp8audit.te.update pass=forward|backward count=<N> unfused=<U>"
//          pushed before FP8GlobalStateManager.reduce_and_update_fp8_tensors runs and popped after
//          it returns: N updates (autocast keys with amaxes to reduce in that direction), U of
//          which TE runs without its fused C entry point (NVTE_UNFUSED_FP8_UPDATE=1, callable
//          amax_compute_algo or scaling_factor_compute_algo).
// At the pop the range's updates are recorded (PYTHON_HOOK): when a TE call or a counted kernel
// update was recorded on the thread inside the range, those counted the fused ones and the hook's
// N - U fused updates are cross-checks, its U unfused ones count; when nothing was, all N count.
#pragma once

#include <cstdint>
#include <string_view>

#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"
#include "fp8audit/nvtx_grammar.h"
#include "fp8audit/patterns.h"

namespace fp8audit::agent {

// The python-hook probe's part of a thread's state (thread_state.h holds it): its open update
// ranges, innermost last.
inline constexpr int kMaxHookRanges = 4;
struct HookThreadState {
  struct Range {
    const void* domain = nullptr;
    uint32_t level = 0;                 // its depth in the domain's range stack
    RuleEvent rule = RuleEvent::kNone;  // kUpdateForward / kUpdateBackward / kUpdate
    uint32_t count = 0;                 // updates the hook announced
    uint32_t unfused = 0;               // of which TE runs without its C entry point
    uint64_t counted_at_open = 0;       // the ledger's counted_updates when the range opened
    uint8_t text_len = 0;
    char text[kRawTextBytes - 1] = {};
  };
  Range ranges[kMaxHookRanges];
  int nranges = 0;
};
HookThreadState& HookStateOf(ThreadState* ts);

struct HookUpdate {
  RuleEvent rule = RuleEvent::kUpdate;  // from pass=
  uint32_t count = 1;                   // count= (absent: 1)
  uint32_t unfused = 0;                 // unfused= (absent: 0; at most count)
};
// Parses an update range's message; false when it is not one.
bool ParseHookUpdate(std::string_view text, HookUpdate* out);
// A mark the hook sends (kHookTeMark, kHookPatchMark, kHookRecomputeMark, kHookRefreshMark,
// kHookFrozenMark, kHookScopeMark, kHookLostMark, kHookUncheckedMark, kHookSiteMark or
// kHookRecipeMark, each with keys).
bool IsHookMark(std::string_view text);
// The hook's mark that TE was imported (kHookTeMark with keys: "fp8audit.te te=<version>").
inline bool IsTeMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookTeMark); }

class HookProbe {
 public:
  explicit HookProbe(RecordSink* sink) : sink_(*sink) {}
  // A mark on `ts`; true when it was the hook's (then recorded).
  bool OnMark(ThreadState* ts, std::string_view text);
  // A range pushed at `level` of `domain`'s stack on `ts`; true when it is a hook update range.
  bool OnPush(ThreadState* ts, const void* domain, uint32_t level, std::string_view text);
  // A range popped at `level` of `domain`'s stack on `ts`: records the hook range opened there.
  void OnPop(ThreadState* ts, const void* domain, uint32_t level);

 private:
  RecordSink& sink_;
};

}  // namespace fp8audit::agent
