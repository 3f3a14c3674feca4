// Structured FP8 events as NVTX marks: header-only, needs nothing but the NVTX3 headers. A wire
// format, like the schemas beside it: runtime/ emits it, the agent parses it
// (agent/src/nvtx_parser.h), any framework may emit it (CMake target fp8audit_nvtx_events). Its
// words (event names, keys, kMicrobatchRange, kStepMark) are declared once, in nvtx_grammar.h.
//
// Every event is an ASCII mark in the NVTX domain "fp8audit" whose message follows this grammar:
//
//   message := event { " " key "=" value }     at most kMaxMessage - 1 bytes
//   event   := autocast.enter | autocast.exit | checkpoint.enter | checkpoint.exit
//            | module.forward | module.backward | update.forward | update.backward | update
//            | stash.push | stash.pop | exception
//   key     := depth (uint) | frame (uint) | phase (uint: 1 original forward, 2 recompute)
//            | kind (reentrant | non-reentrant; non_reentrant is read too) | module (text
//              without spaces) | failed (0 | 1)
//            | count (uint, multiplicity) | pass (forward | backward)
//
// e.g. "checkpoint.enter frame=3 phase=2 kind=reentrant", "update.forward", "stash.pop
// module=layers.1.fc2 frame=3". Unknown keys are ignored. Logical microbatches are the range
// kMicrobatchRange (any domain), optionally naming the logical microbatch: kMicrobatchRange
// followed by " id=7" (id: uint; every range with the same id is one microbatch, e.g. its forward
// and, after other microbatches' forwards, its backward in a pipeline schedule); optimizer steps
// are the mark kStepMark (any domain).
//
// Emit update.* only for state updates that launch no kernel the agent already classifies (e.g. a
// CPU-side update); a classified update kernel is counted from its launch.
#pragma once

#include <nvtx3/nvToolsExt.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "fp8audit/nvtx_grammar.h"
#include "fp8audit/vocabulary.h"

namespace fp8audit::nvtx {

// A formatted message, held by value (no allocation).
struct Message {
  char text[kMaxMessage] = {};
  const char* c_str() const { return text; }
};

namespace detail {

// Appends `value` to `out` with spaces and '=' replaced by '_' so it stays one token.
inline void AppendToken(Message* out, const char* value) {
  std::size_t n = 0;
  while (n < kMaxMessage - 1 && out->text[n] != '\0') ++n;
  for (const char* p = value ? value : ""; *p != '\0' && n < kMaxMessage - 1; ++p) {
    const char c = *p;
    out->text[n++] = (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '=') ? '_' : c;
  }
  out->text[n] = '\0';
}

// Appends " failed=1" when `failed`.
inline void AppendFailed(Message* out, bool failed) {
  if (!failed) return;
  std::size_t n = 0;
  while (n < kMaxMessage - 1 && out->text[n] != '\0') ++n;
  std::snprintf(out->text + n, sizeof(out->text) - n, " %s=1", kKeyFailed);
}

// "<event> <key>=" (then a token).
inline Message EventKey(Event event, const char* key) {
  Message m;
  std::snprintf(m.text, sizeof(m.text), "%s %s=", EventName(event), key);
  return m;
}

}  // namespace detail

// ---- Formatting (pure; what the emitters below send) ----------------------------------------
inline Message FormatAutocastEnter(uint32_t depth) {
  Message m;
  std::snprintf(m.text, sizeof(m.text), "%s %s=%u", EventName(Event::kAutocastEnter), kKeyDepth,
                depth);
  return m;
}
inline Message FormatAutocastExit(uint32_t depth, bool failed = false) {
  Message m;
  std::snprintf(m.text, sizeof(m.text), "%s %s=%u", EventName(Event::kAutocastExit), kKeyDepth,
                depth);
  detail::AppendFailed(&m, failed);
  return m;
}
inline Message FormatCheckpoint(bool enter, uint64_t frame, uint32_t phase, CheckpointKind kind,
                                bool failed = false) {
  Message m;
  std::snprintf(m.text, sizeof(m.text), "%s %s=%llu %s=%u %s=%s",
                EventName(enter ? Event::kCheckpointEnter : Event::kCheckpointExit), kKeyFrame,
                static_cast<unsigned long long>(frame), kKeyPhase, phase, kKeyKind,
                CheckpointKindName(kind).data());
  detail::AppendFailed(&m, failed);
  return m;
}
inline Message FormatModule(bool forward, const char* module) {
  Message m =
      detail::EventKey(forward ? Event::kModuleForward : Event::kModuleBackward, kKeyModule);
  detail::AppendToken(&m, module);
  return m;
}
// direction: +1 forward, -1 backward, 0 not known.
inline Message FormatUpdate(int direction, uint64_t count = 1) {
  const char* event = EventName(direction > 0   ? Event::kUpdateForward
                                : direction < 0 ? Event::kUpdateBackward
                                                : Event::kUpdate);
  Message m;
  if (count == 1) {
    std::snprintf(m.text, sizeof(m.text), "%s", event);
  } else {
    std::snprintf(m.text, sizeof(m.text), "%s %s=%llu", event, kKeyCount,
                  static_cast<unsigned long long>(count));
  }
  return m;
}
inline Message FormatStash(bool push, const char* module, uint64_t frame) {
  Message m;
  std::snprintf(m.text, sizeof(m.text),
                "%s %s=%llu %s=", EventName(push ? Event::kStashPush : Event::kStashPop), kKeyFrame,
                static_cast<unsigned long long>(frame), kKeyModule);
  detail::AppendToken(&m, module);
  return m;
}

// ---- Emitting ----------------------------------------------------------------------------------
// The domain handle; null (and every call a no-op) when no NVTX tool is attached.
inline nvtxDomainHandle_t Domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA(kDomainName);
  return domain;
}

inline nvtxEventAttributes_t Attributes(const char* message) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  return a;
}

inline void Mark(const char* message) {
  const nvtxEventAttributes_t a = Attributes(message);
  nvtxDomainMarkEx(Domain(), &a);
}
inline void Mark(const Message& message) { Mark(message.c_str()); }

inline void AutocastEnter(uint32_t depth) { Mark(FormatAutocastEnter(depth)); }
inline void AutocastExit(uint32_t depth, bool failed = false) {
  Mark(FormatAutocastExit(depth, failed));
}
inline void CheckpointEnter(uint64_t frame, uint32_t phase, CheckpointKind kind) {
  Mark(FormatCheckpoint(true, frame, phase, kind));
}
inline void CheckpointExit(uint64_t frame, uint32_t phase, CheckpointKind kind,
                           bool failed = false) {
  Mark(FormatCheckpoint(false, frame, phase, kind, failed));
}
inline void ModuleForward(const char* module) { Mark(FormatModule(true, module)); }
inline void ModuleBackward(const char* module) { Mark(FormatModule(false, module)); }
inline void UpdateForward(uint64_t count = 1) { Mark(FormatUpdate(+1, count)); }
inline void UpdateBackward(uint64_t count = 1) { Mark(FormatUpdate(-1, count)); }
inline void Update(uint64_t count = 1) { Mark(FormatUpdate(0, count)); }
inline void StashPush(const char* module, uint64_t frame) {
  Mark(FormatStash(true, module, frame));
}
inline void StashPop(const char* module, uint64_t frame) {
  Mark(FormatStash(false, module, frame));
}

// "<kMicrobatchRange> id=<id>": a range of the logical microbatch `id`.
inline Message FormatMicrobatch(uint64_t id) {
  Message m;
  std::snprintf(m.text, sizeof(m.text), "%s %s=%llu", kMicrobatchRange, kKeyId,
                static_cast<unsigned long long>(id));
  return m;
}

// Logical microbatch boundaries and optimizer steps (same names the agent expects by default).
inline void MicrobatchBegin() {
  const nvtxEventAttributes_t a = Attributes(kMicrobatchRange);
  nvtxDomainRangePushEx(Domain(), &a);
}
inline void MicrobatchBegin(uint64_t id) {
  const Message m = FormatMicrobatch(id);
  const nvtxEventAttributes_t a = Attributes(m.c_str());
  nvtxDomainRangePushEx(Domain(), &a);
}
inline void MicrobatchEnd() { nvtxDomainRangePop(Domain()); }
inline void Step() { Mark(kStepMark); }

class MicrobatchScope {
 public:
  MicrobatchScope() { MicrobatchBegin(); }
  ~MicrobatchScope() { MicrobatchEnd(); }
  MicrobatchScope(const MicrobatchScope&) = delete;
  MicrobatchScope& operator=(const MicrobatchScope&) = delete;
};

}  // namespace fp8audit::nvtx
