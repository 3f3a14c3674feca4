#include "agent/src/hook_probe.h"

#include <algorithm>
#include <cstring>

namespace fp8audit::agent {
namespace {

bool ParseU32(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

bool IsRecomputeMark(std::string_view text) {
  return nvtx::HasKeys(text, nvtx::kHookRecomputeMark);
}

bool IsRefreshMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookRefreshMark); }

bool IsFrozenMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookFrozenMark); }

bool IsScopeMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookScopeMark); }

bool IsLostMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookLostMark); }

bool IsUncheckedMark(std::string_view text) {
  return nvtx::HasKeys(text, nvtx::kHookUncheckedMark);
}

bool IsSiteMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookSiteMark); }

bool IsRecipeMark(std::string_view text) { return nvtx::HasKeys(text, nvtx::kHookRecipeMark); }

}  // namespace

bool ParseHookUpdate(std::string_view text, HookUpdate* out) {
  if (!nvtx::IsMessage(text, nvtx::kHookUpdateRange)) return false;
  std::string_view rest = text.substr(std::string_view(nvtx::kHookUpdateRange).size());
  HookUpdate u;
  while (!rest.empty()) {
    rest.remove_prefix(1);
    const size_t end = std::min(rest.find(' '), rest.size());
    const std::string_view token = rest.substr(0, end);
    rest.remove_prefix(end);
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == nvtx::kKeyPass) {
      u.rule = value == nvtx::kPassForward    ? RuleEvent::kUpdateForward
               : value == nvtx::kPassBackward ? RuleEvent::kUpdateBackward
                                              : RuleEvent::kUpdate;
    } else if (key == nvtx::kKeyCount) {
      if (!ParseU32(value, &u.count)) return false;
    } else if (key == nvtx::kKeyUnfused) {
      if (!ParseU32(value, &u.unfused)) return false;
    }
  }
  u.unfused = std::min(u.unfused, u.count);
  *out = u;
  return true;
}

bool IsHookMark(std::string_view text) {
  return IsTeMark(text) || nvtx::HasKeys(text, nvtx::kHookPatchMark) || IsRecomputeMark(text) ||
         IsRefreshMark(text) || IsFrozenMark(text) || IsScopeMark(text) || IsLostMark(text) ||
         IsUncheckedMark(text) || IsSiteMark(text) || IsRecipeMark(text);
}

bool HookProbe::OnMark(ThreadState* ts, std::string_view text) {
  if (!IsHookMark(text)) return false;
  RawEvent e;
  e.kind = IsRecomputeMark(text)   ? RawKind::kRecompute
           : IsRefreshMark(text)   ? RawKind::kWeightRefresh
           : IsFrozenMark(text)    ? RawKind::kFrozenScale
           : IsScopeMark(text)     ? RawKind::kBackwardScope
           : IsLostMark(text)      ? RawKind::kFixLost
           : IsUncheckedMark(text) ? RawKind::kHookUnchecked
           : IsSiteMark(text)      ? RawKind::kCallSite
           : IsRecipeMark(text)    ? RawKind::kRecipe
           : IsTeMark(text)        ? RawKind::kTeVersion
                                   : RawKind::kTePatched;
  e.SetText(text);
  sink_.Record(ts, &e);
  return true;
}

bool HookProbe::OnPush(ThreadState* ts, const void* domain, uint32_t level, std::string_view text) {
  HookUpdate u;
  if (!ParseHookUpdate(text, &u)) return false;
  HookThreadState& hook = HookStateOf(ts);
  if (hook.nranges >= kMaxHookRanges) return true;  // nested beyond reason: not recorded
  sink_.OnActivity(ts, "Python-hook update");
  HookThreadState::Range& r = hook.ranges[hook.nranges++];
  r.domain = domain;
  r.level = level;
  r.rule = u.rule;
  r.count = u.count;
  r.unfused = u.unfused;
  r.counted_at_open = LedgerOf(ts).counted_updates;
  const size_t n = std::min(text.size(), sizeof(r.text));
  std::memcpy(r.text, text.data(), n);
  r.text_len = static_cast<uint8_t>(n);
  return true;
}

void HookProbe::OnPop(ThreadState* ts, const void* domain, uint32_t level) {
  HookThreadState& hook = HookStateOf(ts);
  if (hook.nranges == 0) return;
  const HookThreadState::Range& r = hook.ranges[hook.nranges - 1];
  if (r.domain != domain || r.level != level) return;
  --hook.nranges;
  UpdateLedger& ledger = LedgerOf(ts);
  const bool inner = ledger.counted_updates != r.counted_at_open;
  const uint32_t counted = inner ? r.unfused : r.count;
  const uint32_t crosscheck = r.count - counted;
  const std::string_view text(r.text, r.text_len);
  for (const auto& [kind, n] : {std::pair{RawKind::kPythonUpdate, counted},
                                std::pair{RawKind::kPythonCrossCheck, crosscheck}}) {
    if (n == 0) continue;
    RawEvent e;
    e.kind = kind;
    e.rule = r.rule;
    e.count = n;
    e.SetText(text);
    sink_.Record(ts, &e);
  }
  ledger.counted_updates += counted;
}

}  // namespace fp8audit::agent
