#include "agent/src/converter.h"

#include "agent/src/nvtx_grammar.h"
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
  return raw.kind == RawKind::kKernelUpdate && raw.rule == RuleEvent::kUpdate &&
         raw.scaled_max == ScaledMax::kE5M2;
}

}  // namespace

bool EventConverter::IsProvisional(const RawEvent& raw) const {
  return hint_ == FormatHint::kAuto && !seen_e5m2_ && raw.kind == RawKind::kKernelUpdate &&
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
      return true;
    case RawKind::kBackwardBegin:
    case RawKind::kBackwardEnd:
      e->set_kind(raw.kind == RawKind::kBackwardBegin ? v1::BACKWARD_BEGIN : v1::BACKWARD_END);
      e->set_source(v1::KERNEL);
      e->set_detail(std::string(raw.Text()));
      return true;
    case RawKind::kKernelUpdate: {
      e->set_source(v1::KERNEL);
      e->set_count(raw.count);
      if (raw.fn != nullptr) e->set_detail(raw.fn->name);
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
      e->set_kind(kind);
      return true;
    }
    case RawKind::kStructured:
      e->set_source(v1::NVTX);
      e->set_detail(std::string(raw.Text()));
      return ParseStructuredMessage(raw.Text(), e);
  }
  return false;
}

}  // namespace fp8audit::agent
