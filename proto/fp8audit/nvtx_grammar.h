// The words of the NVTX grammar, declared once: header-only, the C++ standard library alone (no
// NVTX headers), so that the emitter (nvtx_events.h beside this file, python/native/markers.cc)
// and the agent's parser (agent/src/nvtx_parser.cc, hook_probe.cc) use the same spellings.
//
// Structured events (the grammar is in nvtx_events.h): a message is an event name, then keys
// "key=value" separated by spaces. The Python hook's messages (agent/src/hook_probe.h) are marks
// and ranges in any domain, named by the kHook* words below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8audit::nvtx {

// The NVTX domain structured events are marked in.
inline constexpr char kDomainName[] = "fp8audit";
// The logical microbatch range (any domain; "fp8audit.microbatch id=7" names the microbatch) and
// the optimizer-step mark (any domain): the agent's defaults (FP8AUDIT_MICROBATCH_RANGE,
// FP8AUDIT_STEP_MARK).
inline constexpr char kMicrobatchRange[] = "fp8audit.microbatch";
inline constexpr char kStepMark[] = "fp8audit.step";
inline constexpr std::size_t kMaxMessage = 120;  // the agent keeps this many bytes of a message

// ---- structured events ------------------------------------------------------------------------
enum class Event : uint8_t {
  kAutocastEnter,
  kAutocastExit,
  kCheckpointEnter,
  kCheckpointExit,
  kModuleForward,
  kModuleBackward,
  kUpdateForward,
  kUpdateBackward,
  kUpdate,
  kStashPush,
  kStashPop,
  kException,
};
inline constexpr Event kEvents[] = {
    Event::kAutocastEnter, Event::kAutocastExit,   Event::kCheckpointEnter, Event::kCheckpointExit,
    Event::kModuleForward, Event::kModuleBackward, Event::kUpdateForward,   Event::kUpdateBackward,
    Event::kUpdate,        Event::kStashPush,      Event::kStashPop,        Event::kException,
};

// An event's name (NUL-terminated, for printf).
constexpr const char* EventName(Event e) {
  switch (e) {
    case Event::kAutocastEnter:
      return "autocast.enter";
    case Event::kAutocastExit:
      return "autocast.exit";
    case Event::kCheckpointEnter:
      return "checkpoint.enter";
    case Event::kCheckpointExit:
      return "checkpoint.exit";
    case Event::kModuleForward:
      return "module.forward";
    case Event::kModuleBackward:
      return "module.backward";
    case Event::kUpdateForward:
      return "update.forward";
    case Event::kUpdateBackward:
      return "update.backward";
    case Event::kUpdate:
      return "update";
    case Event::kStashPush:
      return "stash.push";
    case Event::kStashPop:
      return "stash.pop";
    case Event::kException:
      return "exception";
  }
  return "?";
}
constexpr std::optional<Event> ParseEvent(std::string_view name) {
  for (Event e : kEvents) {
    if (name == EventName(e)) return e;
  }
  return std::nullopt;
}

// Keys (NUL-terminated, for printf).
inline constexpr char kKeyDepth[] = "depth";    // uint: autocast nesting
inline constexpr char kKeyFrame[] = "frame";    // uint: checkpoint frame
inline constexpr char kKeyPhase[] = "phase";    // uint: 1 original forward, 2 recompute
inline constexpr char kKeyKind[] = "kind";      // CheckpointKindName (vocabulary.h)
inline constexpr char kKeyModule[] = "module";  // text without spaces
inline constexpr char kKeyFailed[] = "failed";  // 0 | 1
inline constexpr char kKeyCount[] = "count";    // uint: multiplicity
inline constexpr char kKeyPass[] = "pass";      // kPassForward | kPassBackward
inline constexpr char kKeyId[] = "id";          // uint: the logical microbatch (kMicrobatchRange)
inline constexpr char kPassForward[] = "forward";
inline constexpr char kPassBackward[] = "backward";

// ---- the Python hook's marks and ranges (python/fp8audit/hook) --------------------------------
// "fp8audit.te te=<version>[ semantics=<s>]": TE was imported; semantics, where TE's own code shows
// an ownership whatever its version (te-3456: TE PR #3456's backward scheduling).
inline constexpr char kHookTeMark[] = "fp8audit.te";
inline constexpr char kHookPatchMark[] = "fp8audit.patch";  // "... te=<version> semantics=<s>"
inline constexpr char kHookRecomputeMark[] = "fp8audit.te.recompute";
// fp8audit.te's safety net: "fp8audit.te.lost pass=backward reason=<r>", the fix lost a backward
// update.
inline constexpr char kHookLostMark[] = "fp8audit.te.lost";
inline constexpr char kKeyReason[] = "reason";
// "fp8audit.te.unchecked check=<c> reason=<r>": a check of the hook could not run in this process
// (from that moment on), sent once per process and check when it gives up; c names the check
// (recompute, refresh, frozen, scope, or a feature that failed whole: te-count, te-recompute,
// ...), r a short token (the exception's class, or why: no-quantize-weight, ...).
inline constexpr char kHookUncheckedMark[] = "fp8audit.te.unchecked";
inline constexpr char kKeyCheck[] = "check";
// "fp8audit.te.site site=<path>:<line> in <function>": where in the job's own Python code the
// thread's next hook event happened (python/fp8audit/hook/callsite.py); the value runs to the end
// of the text and may hold spaces; empty: no frame of the job's own on the stack.
inline constexpr char kHookSiteMark[] = "fp8audit.te.site";
// "fp8audit.te.recipe recipe=<class>": a TE module ran under an FP8 recipe of that class, the
// first time in this process (python/fp8audit/hook/recompute.py).
inline constexpr char kHookRecipeMark[] = "fp8audit.te.recipe";
inline constexpr char kKeyRecipe[] = "recipe";
// The recipe class with global state updates (DelayedScaling's amax histories and scales).
inline constexpr char kDelayedScalingRecipe[] = "DelayedScaling";
inline constexpr char kKeySite[] = "site";
inline constexpr char kHookUpdateRange[] = "fp8audit.te.update";  // pass=, count=, unfused=
inline constexpr char kKeyTe[] = "te";
inline constexpr char kKeySemantics[] = "semantics";
inline constexpr char kKeyUnfused[] = "unfused";
inline constexpr char kKeyFp8[] = "fp8";
inline constexpr char kKeyForwardFp8[] = "forward_fp8";
inline constexpr char kKeyCheckpoint[] = "checkpoint";
// "fp8audit.te.refresh module=<Class>#<n> scale=<forward|live>[ checkpoint=<where>]": while a
// backward pass ran (a checkpoint recompute), the TE module re-quantized a weight into the FP8
// weight cache its forward had filled (quantize_weight with a workspace and update_workspace=True),
// one mark per weight (python/fp8audit/hook); keys in any order.
inline constexpr char kHookRefreshMark[] = "fp8audit.te.refresh";
// The scale a refreshed weight was quantized under: kScaleForward or kScaleLive.
inline constexpr char kKeyScale[] = "scale";
// The forward's by construction: a recipe that scales a weight from the weight itself (all but
// DelayedScaling), or DelayedScaling inside TE's recompute phase (the forward's scales restored).
inline constexpr char kScaleForward[] = "forward";
// DelayedScaling outside TE's recompute phase: the global state's scale of that moment.
inline constexpr char kScaleLive[] = "live";
// "fp8audit.te.frozen module=<Class>#<n>": a TE module ran a forward in FP8 under DelayedScaling
// with scales that TE's update never reaches: its current state is not the one registered in TE's
// global buffers (a recipe switched away and back re-made the state, TE keeps the first
// registration), so its scales stay where they are for the rest of the run (python/fp8audit/hook),
// one mark per module and state.
inline constexpr char kHookFrozenMark[] = "fp8audit.te.frozen";
// "fp8audit.te.scope at=enter|exit": TE PR #3456's quantization_backward_scope() was entered at
// its outermost level (the site mark before it says where), or left at it (after TE's exit ran
// the backward update), on the thread that entered or left it (python/fp8audit/hook/scope.py).
inline constexpr char kHookScopeMark[] = "fp8audit.te.scope";
inline constexpr char kKeyAt[] = "at";
inline constexpr char kScopeEnter[] = "enter";
inline constexpr char kScopeExit[] = "exit";
// What else of a recomputed module's quantization context differs from its forward's.
inline constexpr char kKeyContext[] = "context";
inline constexpr char kContextRecipe[] = "recipe";  // another recipe class, or other parameters
// Same recipe, but the module called with another fp8_output or fp8_grad (its forward's own
// quantization kwargs, where its class takes them) than its forward: the kwarg's name, both
// joined by '+'. One context per mark: FP8 on/off first (no context), then recipe, then these.
inline constexpr char kContextFp8Output[] = "fp8_output";
inline constexpr char kContextFp8Grad[] = "fp8_grad";
inline constexpr char kContextFp8OutputAndGrad[] = "fp8_output+fp8_grad";

// Whether `text` is message `name`, alone or followed by a space and keys.
constexpr bool IsMessage(std::string_view text, std::string_view name) {
  return text.substr(0, name.size()) == name &&
         (text.size() == name.size() || text[name.size()] == ' ');
}
// Whether `text` is message `name` followed by a space and keys.
constexpr bool HasKeys(std::string_view text, std::string_view name) {
  return text.size() > name.size() && IsMessage(text, name);
}

}  // namespace fp8audit::nvtx
