#include "reports/event_text.h"

#include <cinttypes>
#include <cstdio>

#include "fp8audit/vocabulary_proto.h"
#include "reports/verdict_words.h"

namespace fp8audit::reports {

std::string TruncateUtf8(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  static constexpr std::string_view kEllipsis = "\xe2\x80\xa6";  // U+2026
  size_t cut = max_bytes > kEllipsis.size() ? max_bytes - kEllipsis.size() : 0;
  // Step back over continuation bytes (10xxxxxx) so the cut lands on a character boundary.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  std::string out(s.substr(0, cut));
  out += kEllipsis;
  return out;
}

namespace {

// The length of the UTF-8 sequence at `s[i]` when it is a character that changes how the text
// around it is shown rather than a visible one: the bidirectional controls (U+061C, U+200E,
// U+200F, U+202A..U+202E, U+2066..U+2069: a right-to-left override makes "gpj.exe" read
// "exe.jpg") and the line and paragraph separators (U+2028, U+2029); else 0.
size_t FormatControlBytes(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  if (at(i) == 0xD8 && at(i + 1) == 0x9C) return 2;  // U+061C
  if (at(i) != 0xE2) return 0;
  const unsigned b = at(i + 1), c = at(i + 2);
  if (b == 0x80 && (c == 0x8E || c == 0x8F || (c >= 0xA8 && c <= 0xAE))) return 3;
  if (b == 0x81 && c >= 0xA6 && c <= 0xA9) return 3;
  return 0;
}

}  // namespace

std::string Printable(std::string_view s, size_t max_bytes) {
  const std::string cut = TruncateUtf8(s, max_bytes);
  std::string out;
  out.reserve(cut.size());
  for (size_t i = 0; i < cut.size(); ++i) {
    const auto u = static_cast<unsigned char>(cut[i]);
    if (u < 0x20 || u == 0x7F) {
      out += '?';
    } else if (u == 0xC2 && i + 1 < cut.size() && static_cast<unsigned char>(cut[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(cut[i + 1]) <= 0x9F) {
      out += '?';  // C1 control (U+0080..U+009F), e.g. a terminal's CSI
      ++i;
    } else if (const size_t n = FormatControlBytes(cut, i); n > 0) {
      out += '?';  // reorders or breaks the text around it
      i += n - 1;
    } else {
      out += cut[i];
    }
  }
  return out;
}

void BoundEventStrings(v1::Event* event) {
  if (event->detail().size() > kMaxStoredString) {
    event->set_detail(TruncateUtf8(event->detail(), kMaxStoredString));
  }
  if (event->module().size() > kMaxStoredString) {
    event->set_module(TruncateUtf8(event->module(), kMaxStoredString));
  }
}

void BoundHeaderStrings(v1::TraceHeader* h) {
  constexpr int kMaxCommand = 64;
  constexpr int kMaxProbes = 16;
  for (std::string* str :
       {h->mutable_host(), h->mutable_agent_version(), h->mutable_gpu(), h->mutable_driver(),
        h->mutable_cuda(), h->mutable_markers(), h->mutable_cupti()}) {
    if (str->size() > kMaxStoredString) *str = TruncateUtf8(*str, kMaxStoredString);
  }
  if (h->command_size() > kMaxCommand) {
    h->mutable_command()->DeleteSubrange(kMaxCommand, h->command_size() - kMaxCommand);
    h->set_command_cut(true);
  }
  for (std::string& arg : *h->mutable_command()) {
    if (arg.size() > kMaxStoredString) {
      arg = TruncateUtf8(arg, kMaxStoredString);
      h->set_command_cut(true);
    }
  }
  if (h->probes_size() > kMaxProbes) {
    h->mutable_probes()->DeleteSubrange(kMaxProbes, h->probes_size() - kMaxProbes);
  }
  for (std::string& p : *h->mutable_probes()) {
    if (p.size() > 64) p = TruncateUtf8(p, 64);
  }
  if (h->probe_mode().size() > 64) h->set_probe_mode(TruncateUtf8(h->probe_mode(), 64));
}

std::string PassName(v1::Pass pass) {
  switch (pass) {
    case v1::FORWARD:
      return "forward";
    case v1::BACKWARD:
      return "backward";
    default:
      return "-";
  }
}

std::string SourceName(v1::Source source) {
  switch (source) {
    case v1::MODEL:
      return "model";
    case v1::NVTX:
      return "nvtx";
    case v1::KERNEL:
      return "kernel";
    case v1::RUNTIME:
      return "runtime";
    case v1::TE_CALL:
      return "te-call";
    case v1::PYTHON_HOOK:
      return "python-hook";
    default:
      return "-";
  }
}

std::string KindName(v1::EventKind kind) {
  switch (kind) {
    case v1::AUTOCAST_ENTER:
      return "autocast enter";
    case v1::AUTOCAST_EXIT:
      return "autocast exit";
    case v1::CHECKPOINT_ENTER:
      return "checkpoint enter";
    case v1::CHECKPOINT_EXIT:
      return "checkpoint exit";
    case v1::MODULE_FORWARD:
      return "module forward";
    case v1::MODULE_BACKWARD:
      return "module backward";
    case v1::UPDATE_FORWARD:
      return "forward update";
    case v1::UPDATE_BACKWARD:
      return "backward update";
    case v1::STASH_PUSH:
      return "stash push";
    case v1::STASH_POP:
      return "stash pop";
    case v1::MICROBATCH_BEGIN:
      return "microbatch begin";
    case v1::MICROBATCH_END:
      return "microbatch end";
    case v1::STEP:
      return "optimizer step";
    case v1::UPDATE:
      return "update";
    case v1::BACKWARD_BEGIN:
      return "backward begin";
    case v1::BACKWARD_END:
      return "backward end";
    case v1::EXCEPTION:
      return "exception";
    case v1::VIOLATION:
      return "violation";
    case v1::TE_VERSION:
      return "TE version";
    case v1::TE_PATCHED:
      return "TE patched";
    case v1::PROBES:
      return "probes changed";
    case v1::CROSSCHECK_UPDATE_FORWARD:
      return "forward update cross-check";
    case v1::CROSSCHECK_UPDATE_BACKWARD:
      return "backward update cross-check";
    case v1::CROSSCHECK_UPDATE:
      return "update cross-check";
    case v1::MODULE_RECOMPUTE:
      return "module recompute";
    case v1::FIX_LOST_UPDATE:
      return "fix lost an update";
    case v1::PYTHON_HOOK_ABSENT:
      return "Python hook absent";
    case v1::CHILD_WITHOUT_AGENT:
      return "program without the agent";
    case v1::CALL_SITE:
      return "call site";
    case v1::RECIPE:
      return "FP8 recipe";
    case v1::WEIGHT_REFRESH:
      return "weight cache refresh";
    case v1::FROZEN_SCALE:
      return "frozen scale";
    case v1::BACKWARD_SCOPE:
      return "quantization_backward_scope";
    case v1::HOOK_UNCHECKED:
      return "hook check not run";
    default:
      return "event " + std::to_string(static_cast<int>(kind));
  }
}

std::string PhaseName(uint32_t checkpoint_phase) {
  switch (checkpoint_phase) {
    case 1:
      return "original forward";
    case 2:
      return "recompute";
    default:
      return "phase " + std::to_string(checkpoint_phase);
  }
}

std::string ViolationKindName(v1::Violation::Kind kind) {
  switch (kind) {
    case v1::Violation::FORWARD_COUNT:
      return "forward count";
    case v1::Violation::BACKWARD_COUNT:
      return "backward count";
    case v1::Violation::STASH_MISSING:
      return "stash missing";
    case v1::Violation::STASH_LEFT_OVER:
      return "stash left over";
    case v1::Violation::UNKNOWN_FRAME:
      return "unknown frame";
    case v1::Violation::UNBALANCED:
      return "unbalanced";
    case v1::Violation::TRACE_DAMAGED:
      return "trace damaged";
    case v1::Violation::RANK_DISAGREEMENT:
      return "rank disagreement";
    case v1::Violation::RECOMPUTE_PRECISION:
      return "recompute precision";
    case v1::Violation::RECOMPUTE_WEIGHT_REFRESH:
      return "recompute weight refresh";
    case v1::Violation::FROZEN_SCALE:
      return "frozen scale";
    case v1::Violation::BACKWARD_SCOPE_OPEN:
      return "backward scope left open";
    case v1::Violation::BACKWARD_SCOPE_RANKS:
      return "backward scope not on every rank";
    default:
      return "violation";
  }
}

std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  std::string out = std::to_string(n);
  out += ' ';
  out += n == 1 ? one : many;
  return out;
}

std::string Millis(uint64_t ns, uint64_t base_ns) {
  const bool negative = ns < base_ns;
  const uint64_t d = negative ? base_ns - ns : ns - base_ns;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, negative ? "-" : "", d / 1000000,
                (d / 1000) % 1000);
  return buf;
}

bool IsCrossCheckKind(v1::EventKind kind) {
  return kind == v1::CROSSCHECK_UPDATE_FORWARD || kind == v1::CROSSCHECK_UPDATE_BACKWARD ||
         kind == v1::CROSSCHECK_UPDATE;
}

v1::Pass ShownPass(const v1::Event& e) {
  switch (e.kind()) {
    case v1::UPDATE_FORWARD:
    case v1::CROSSCHECK_UPDATE_FORWARD:
      return v1::FORWARD;
    case v1::UPDATE_BACKWARD:
    case v1::CROSSCHECK_UPDATE_BACKWARD:
      return v1::BACKWARD;
    default:
      return e.pass();
  }
}

std::string FactText(const v1::Event& e) {
  std::string text;
  if (e.kind() == v1::TE_VERSION || e.kind() == v1::TE_PATCHED) {
    text = e.te_version().empty() ? "version not recorded" : Printable(e.te_version(), 64);
    if (e.kind() == v1::TE_PATCHED && !e.semantics().empty()) {
      text += ", semantics " + Printable(e.semantics(), 64);
    }
  } else if (e.kind() == v1::PROBES) {
    std::string names;
    for (int i = 0; i < e.probes_size() && i < 16; ++i) {
      names += (names.empty() ? "" : ", ") + Printable(e.probes(i), 64);
    }
    text = "to " + (names.empty() ? std::string("none") : names);
    if (!e.detail().empty()) text += ": " + Printable(e.detail());
  }
  return text;
}

std::string EventLine(const v1::Event& e, uint64_t base_ns) {
  const bool update =
      e.kind() == v1::UPDATE_FORWARD || e.kind() == v1::UPDATE_BACKWARD || e.kind() == v1::UPDATE;
  const bool cross = IsCrossCheckKind(e.kind());
  const bool fact =
      e.kind() == v1::TE_VERSION || e.kind() == v1::TE_PATCHED || e.kind() == v1::PROBES;
  // An update (and a cross-check) shows its direction where other events show their pass.
  const v1::Pass shown = ShownPass(e);
  std::string line = "t=" + Millis(e.timestamp_ns(), base_ns) + "ms thread " +
                     std::to_string(e.thread_id()) + " " + PassName(shown) + " " +
                     SourceName(e.source());
  if (cross) {
    line += " cross-check";
  } else if (!update) {
    line += " " + KindName(e.kind());
  }
  if (fact) return line + " " + FactText(e);  // the detail is the message these came from
  if (e.kind() == v1::CHECKPOINT_ENTER || e.kind() == v1::CHECKPOINT_EXIT) {
    line += " frame " + std::to_string(e.frame());
    if (e.checkpoint_phase() != 0) line += " " + PhaseName(e.checkpoint_phase());
    line += " " + std::string(CheckpointKindName(FromProto(e.checkpoint_kind())));
  }
  if (e.kind() == v1::AUTOCAST_ENTER || e.kind() == v1::AUTOCAST_EXIT) {
    line += " depth " + std::to_string(e.autocast_depth());
  }
  if (!e.module().empty()) line += " module " + Printable(e.module());
  if (e.kind() == v1::MODULE_RECOMPUTE) {
    const auto on = [](v1::Fp8Mode m) {
      return m == v1::FP8_ON ? "on" : m == v1::FP8_OFF ? "off" : "not known";
    };
    line += std::string(" FP8 ") + on(e.fp8()) + " (forward: " + on(e.forward_fp8()) + ")";
    if (!e.context().empty()) line += " context differs: " + Printable(e.context(), 32);
  }
  if (e.kind() == v1::WEIGHT_REFRESH && !e.context().empty()) {
    line += " scale " + Printable(e.context(), 32);
  }
  if (e.kind() == v1::BACKWARD_SCOPE) line += " " + Printable(e.context(), 32);
  if (e.failed()) line += " (exception)";
  if (!e.detail().empty()) {
    line += " " + Printable(e.detail());
    // Field 5 (detail) stored escaped: its \xNN are the recorder's, not the kernel's.
    if ((e.escaped_fields() >> v1::Event::kDetailFieldNumber & 1) != 0) {
      line += " (escaped: not UTF-8 as recorded)";
    }
  }
  if ((update || cross) && e.tensors() > 0) {
    line += " (" + std::to_string(e.tensors()) + (e.tensors() == 1 ? " tensor)" : " tensors)");
  }
  if ((update || cross) && e.count() > 1) line += " (x" + std::to_string(e.count()) + ")";
  if (update && e.kind() != v1::UPDATE && e.pass() != v1::PASS_UNSPECIFIED && e.pass() != shown) {
    line += " (during the " + PassName(e.pass()) + " pass)";
  }
  return line;
}

std::string RankName(int32_t rank) {
  return rank >= 0 ? "rank " + std::to_string(rank) : std::string("no rank");
}

std::string RankTitle(const v1::RankReport& r) {
  std::string title = RankName(r.rank());
  std::string inner;
  if (!r.header().host().empty()) inner = Printable(r.header().host(), 128);
  if (r.header().pid() != 0) {
    if (!inner.empty()) inner += ", ";
    inner += "pid " + std::to_string(r.header().pid());
  }
  if (!inner.empty()) title += " (" + inner + ")";
  return title;
}

std::string ExpectedText(const v1::MicrobatchResult& row) {
  return std::to_string(row.expected_forward()) + "/" + std::to_string(row.expected_backward());
}

std::string VerdictWord(v1::Verdict verdict) {
  switch (verdict) {
    case v1::FAIL:
      return std::string(kWordFail);
    case v1::PASS:
      return std::string(kWordPass);
    default:
      return std::string(kWordNothingAudited);  // not judged (nothing audited)
  }
}

}  // namespace fp8audit::reports
