#include "agent/src/converter.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "agent/src/nvtx_parser.h"
#include "fp8audit/nvtx_grammar.h"
#include "fp8audit/vocabulary.h"
#include "proto/text_escape.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

v1::EventKind ByPass(uint8_t pass) {
  if (pass == kPassForward) return v1::UPDATE_FORWARD;
  if (pass == kPassBackward) return v1::UPDATE_BACKWARD;
  return v1::UPDATE;
}

bool IsE5M2Update(const RawEvent& raw) {
  return IsDtypeUpdateKind(raw.kind) && raw.rule == RuleEvent::kUpdate &&
         raw.scaled_max == ScaledMax::kE5M2;
}

v1::EventKind CrossCheck(v1::EventKind kind) {
  if (kind == v1::UPDATE_FORWARD) return v1::CROSSCHECK_UPDATE_FORWARD;
  if (kind == v1::UPDATE_BACKWARD) return v1::CROSSCHECK_UPDATE_BACKWARD;
  return v1::CROSSCHECK_UPDATE;
}

// The value of `key=` in a space-separated message, kept to printable ASCII that a version or
// semantics name uses (others become '?'), at most 64 characters.
std::string KeyValue(std::string_view message, std::string_view key) {
  size_t at = 0;
  while (at < message.size()) {
    const size_t end = std::min(message.find(' ', at), message.size());
    const std::string_view token = message.substr(at, end - at);
    if (token.size() > key.size() && token.substr(0, key.size()) == key &&
        token[key.size()] == '=') {
      std::string out(token.substr(key.size() + 1, 64));
      for (char& c : out) {
        const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                        (c >= 'A' && c <= 'Z') || c == '.' || c == '+' || c == '-' || c == '_' ||
                        c == '#';
        if (!ok) c = '?';
      }
      return out;
    }
    at = end + 1;
  }
  return {};
}

}  // namespace

bool EventConverter::IsProvisional(const RawEvent& raw) const {
  return hint_ == FormatHint::kAuto && !seen_e5m2_ && IsDtypeUpdateKind(raw.kind) &&
         raw.rule == RuleEvent::kUpdate && raw.scaled_max == ScaledMax::kE4M3 &&
         raw.pass == kPassBackward;
}

void EventConverter::Push(const RawEvent& raw, std::vector<v1::Event>* out) {
  if (!held_.empty()) {
    held_.push_back(raw);
    if (IsE5M2Update(raw)) {
      seen_e5m2_ = true;
      Release(Resolve::kForward, out);
    } else if (raw.kind == RawKind::kBackwardEnd || held_.size() >= kMaxHeld) {
      Release(Resolve::kByPass, out);
    }
    return;
  }
  if (IsE5M2Update(raw)) seen_e5m2_ = true;
  if (IsProvisional(raw)) {
    held_.push_back(raw);
    return;
  }
  v1::Event event;
  if (Convert(raw, Resolve::kNormal, &event)) out->push_back(std::move(event));
}

void EventConverter::Tick(uint64_t now_ns, std::vector<v1::Event>* out) {
  if (!held_.empty() && now_ns > held_.front().ts_ns + kMaxHoldNs) Release(Resolve::kByPass, out);
}

void EventConverter::Flush(std::vector<v1::Event>* out) { Release(Resolve::kByPass, out); }

void EventConverter::Release(Resolve how, std::vector<v1::Event>* out) {
  for (const RawEvent& raw : held_) {
    v1::Event event;
    if (Convert(raw, raw.scaled_max == ScaledMax::kE4M3 ? how : Resolve::kNormal, &event)) {
      out->push_back(std::move(event));
    }
  }
  held_.clear();
}

bool EventConverter::Convert(const RawEvent& raw, Resolve how, v1::Event* e) const {
  if (!ConvertFields(raw, how, e)) return false;
  EscapeNonUtf8Fields(e);  // names and messages are bytes; the record's strings must be UTF-8
  return true;
}

bool EventConverter::ConvertFields(const RawEvent& raw, Resolve how, v1::Event* e) const {
  e->set_timestamp_ns(raw.ts_ns);
  e->set_thread_id(raw.tid);
  e->set_kernel_launches(raw.launches);
  e->set_pass(static_cast<v1::Pass>(raw.pass));
  switch (raw.kind) {
    case RawKind::kMicrobatchBegin:
    case RawKind::kMicrobatchEnd:
    case RawKind::kStep:
      e->set_kind(raw.kind == RawKind::kStep            ? v1::STEP
                  : raw.kind == RawKind::kMicrobatchEnd ? v1::MICROBATCH_END
                                                        : v1::MICROBATCH_BEGIN);
      e->set_source(v1::NVTX);
      e->set_detail(std::string(raw.Text()));
      if (uint64_t id = 0;
          raw.kind == RawKind::kMicrobatchBegin && ParseMicrobatchId(raw.Text(), &id)) {
        e->set_microbatch_id(id);
      }
      return true;
    case RawKind::kBackwardBegin:
    case RawKind::kBackwardEnd:
      e->set_kind(raw.kind == RawKind::kBackwardBegin ? v1::BACKWARD_BEGIN : v1::BACKWARD_END);
      e->set_source(v1::KERNEL);
      e->set_detail(std::string(raw.Text()));
      return true;
    case RawKind::kKernelUpdate:
    case RawKind::kKernelCrossCheck:
    case RawKind::kTeCall: {
      e->set_source(raw.kind == RawKind::kTeCall ? v1::TE_CALL : v1::KERNEL);
      e->set_count(raw.count);
      if (raw.fn != nullptr) e->set_detail(raw.fn->name);
      if (raw.kind == RawKind::kTeCall) e->set_tensors(raw.Tensors());
      v1::EventKind kind = ByPass(raw.pass);
      if (raw.rule == RuleEvent::kUpdateForward) {
        kind = v1::UPDATE_FORWARD;
      } else if (raw.rule == RuleEvent::kUpdateBackward) {
        kind = v1::UPDATE_BACKWARD;
      } else if (raw.scaled_max == ScaledMax::kE5M2) {
        kind = v1::UPDATE_BACKWARD;
      } else if (raw.scaled_max == ScaledMax::kE4M3) {
        const bool hybrid = hint_ == FormatHint::kHybrid ||
                            (hint_ == FormatHint::kAuto && seen_e5m2_) || how == Resolve::kForward;
        if (hybrid && how != Resolve::kByPass) kind = v1::UPDATE_FORWARD;
      }
      e->set_kind(raw.kind == RawKind::kKernelCrossCheck ? CrossCheck(kind) : kind);
      return true;
    }
    case RawKind::kPythonUpdate:
    case RawKind::kPythonCrossCheck: {
      e->set_source(v1::PYTHON_HOOK);
      e->set_count(raw.count);
      e->set_detail(std::string(raw.Text()));
      const v1::EventKind kind = raw.rule == RuleEvent::kUpdateForward    ? v1::UPDATE_FORWARD
                                 : raw.rule == RuleEvent::kUpdateBackward ? v1::UPDATE_BACKWARD
                                                                          : ByPass(raw.pass);
      e->set_kind(raw.kind == RawKind::kPythonCrossCheck ? CrossCheck(kind) : kind);
      return true;
    }
    case RawKind::kTeVersion:
    case RawKind::kTePatched:
      e->set_kind(raw.kind == RawKind::kTeVersion ? v1::TE_VERSION : v1::TE_PATCHED);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_detail(std::string(raw.Text()));
      e->set_te_version(KeyValue(raw.Text(), nvtx::kKeyTe));
      // TE_PATCHED: the semantics applied; TE_VERSION: the one TE's own code shows (a fingerprint).
      e->set_semantics(KeyValue(raw.Text(), nvtx::kKeySemantics));
      return true;
    case RawKind::kRecompute: {
      e->set_kind(v1::MODULE_RECOMPUTE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_module(KeyValue(raw.Text(), nvtx::kKeyModule));
      const auto mode = [&](std::string_view key) {
        const std::string v = KeyValue(raw.Text(), key);
        return v == "1" ? v1::FP8_ON : v == "0" ? v1::FP8_OFF : v1::FP8_MODE_UNSPECIFIED;
      };
      e->set_fp8(mode(nvtx::kKeyFp8));
      e->set_forward_fp8(mode(nvtx::kKeyForwardFp8));
      e->set_detail(KeyValue(raw.Text(), nvtx::kKeyCheckpoint));
      e->set_context(KeyValue(raw.Text(), nvtx::kKeyContext));
      return true;
    }
    case RawKind::kWeightRefresh:
      e->set_kind(v1::WEIGHT_REFRESH);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::BACKWARD);
      e->set_module(KeyValue(raw.Text(), nvtx::kKeyModule));
      e->set_context(KeyValue(raw.Text(), nvtx::kKeyScale));
      e->set_detail(KeyValue(raw.Text(), nvtx::kKeyCheckpoint));
      return true;
    case RawKind::kFrozenScale:
      e->set_kind(v1::FROZEN_SCALE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::FORWARD);  // sent before the module's forward, outside any backward
      e->set_module(KeyValue(raw.Text(), nvtx::kKeyModule));
      return true;
    case RawKind::kBackwardScope:
      e->set_kind(v1::BACKWARD_SCOPE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::PASS_UNSPECIFIED);  // it opens no pass
      e->set_context(KeyValue(raw.Text(), nvtx::kKeyAt));
      return true;
    case RawKind::kHookAbsent:
      e->set_kind(v1::PYTHON_HOOK_ABSENT);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_detail(std::string(raw.Text()));
      return true;
    case RawKind::kChildWithoutAgent:
      e->set_kind(v1::CHILD_WITHOUT_AGENT);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_detail(std::string(raw.Text()));
      return true;
    case RawKind::kCallSite: {
      e->set_kind(v1::CALL_SITE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::PASS_UNSPECIFIED);
      const std::string_view text = raw.Text();
      const size_t at = text.find(" site=");  // the value runs to the end, spaces and all
      if (at != std::string_view::npos) e->set_detail(std::string(text.substr(at + 6)));
      return true;
    }
    case RawKind::kRecipe:
      e->set_kind(v1::RECIPE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_detail(KeyValue(raw.Text(), nvtx::kKeyRecipe));
      return true;
    case RawKind::kFixLost:
      e->set_kind(v1::FIX_LOST_UPDATE);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::BACKWARD);
      e->set_detail(KeyValue(raw.Text(), nvtx::kKeyReason));
      return true;
    case RawKind::kHookUnchecked:
      e->set_kind(v1::HOOK_UNCHECKED);
      e->set_source(v1::PYTHON_HOOK);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_context(KeyValue(raw.Text(), nvtx::kKeyCheck));
      e->set_detail(KeyValue(raw.Text(), nvtx::kKeyReason));
      return true;
    case RawKind::kProbes:
      e->set_kind(v1::PROBES);
      e->set_pass(v1::PASS_UNSPECIFIED);
      e->set_detail(std::string(raw.Text()));
      for (const std::string& name : ProbeNames(static_cast<uint32_t>(raw.count))) {
        e->add_probes(name);
      }
      return true;
    case RawKind::kStructured:
      e->set_source(v1::NVTX);
      e->set_detail(std::string(raw.Text()));
      return ParseStructuredMessage(raw.Text(), e);
  }
  return false;
}

}  // namespace fp8audit::agent
