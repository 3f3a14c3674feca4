#include "agent/src/live_check.h"

#include <optional>
#include <string_view>

#include "fp8audit/vocabulary_proto.h"

#if FP8AUDIT_AGENT_HAVE_AUDITOR
#include "reports/auditor.h"
#endif

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

// `name` without its trailing parameter list, at most 160 bytes (the end kept), printable.
std::string ShortName(std::string_view name) {
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        if (i > 0) name = name.substr(0, i);
        break;
      }
    }
  }
  std::string out;
  if (name.size() > 160) {
    out = "..." + std::string(name.substr(name.size() - 157));
  } else {
    out = std::string(name);
  }
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = '?';
  }
  return out;
}

int Direction(const v1::Event& e) {
  if (e.kind() == v1::UPDATE_FORWARD) return 0;
  if (e.kind() == v1::UPDATE_BACKWARD) return 1;
  if (e.kind() == v1::UPDATE) return e.pass() == v1::BACKWARD ? 1 : 0;
  return -1;
}

}  // namespace

std::string DescribeUpdate(const v1::Event& e) {
  std::string s = e.kind() == v1::UPDATE_FORWARD    ? "forward update"
                  : e.kind() == v1::UPDATE_BACKWARD ? "backward update"
                                                    : "update";
  if (e.count() > 1) s += " x" + std::to_string(e.count());
  if (!e.detail().empty()) {
    // The probe that recorded it, by name (a kernel's or TE entry point's name unquoted), else
    // the NVTX message it came from.
    const std::optional<Probe> probe = ProbeOf(e.source());
    const bool quoted = !probe || *probe == Probe::kPythonHook;
    s += " " + std::string(probe ? ProbeName(*probe) : "nvtx") + (quoted ? " '" : " ") +
         ShortName(e.detail()) + (quoted ? "'" : "");
  }
  s += " in the ";
  s += e.pass() == v1::BACKWARD  ? "backward pass"
       : e.pass() == v1::FORWARD ? "forward pass"
                                 : "unknown pass";
  s += " (thread " + std::to_string(e.thread_id()) + ")";
  return s;
}

std::string DescribeFailure(const v1::MicrobatchResult& row, const std::string& first_excess) {
  std::string s = "microbatch " + std::to_string(row.index()) + ": forward updates " +
                  std::to_string(row.forward_updates()) + " (expected " +
                  std::to_string(row.expected_forward()) + "), backward updates " +
                  std::to_string(row.backward_updates()) + " (expected " +
                  std::to_string(row.expected_backward()) + "): ";
  std::string what;
  const uint32_t count[2] = {row.forward_updates(), row.backward_updates()};
  const uint32_t expected[2] = {row.expected_forward(), row.expected_backward()};
  const char* const words[2] = {"forward", "backward"};
  for (int dir = 0; dir < 2; ++dir) {
    if (count[dir] == expected[dir]) continue;
    if (!what.empty()) what += "; ";
    if (count[dir] < expected[dir]) {
      what += std::string("missing ") + words[dir] + " update";
      continue;
    }
    // The first update beyond the expected ones, from the row's kept events.
    uint64_t seen = 0;
    std::string extra;
    for (const v1::Event& e : row.updates()) {
      if (Direction(e) != dir) continue;
      seen += e.count() > 0 ? e.count() : 1;
      if (seen > expected[dir]) {
        extra = DescribeUpdate(e);
        break;
      }
    }
    if (extra.empty() && !first_excess.empty()) extra = first_excess;
    what += "extra " + (extra.empty() ? std::string(words[dir]) + " update" : extra);
  }
  if (what.empty()) what = "see the trace";
  return s + what;
}

#if FP8AUDIT_AGENT_HAVE_AUDITOR

struct LiveCheck::Impl {
  explicit Impl(const reports::AuditorOptions& options) : auditor(options) {}
  reports::Auditor auditor;
};

LiveCheck::LiveCheck(const Config& config) : config_(config) {
  reports::AuditorOptions options;
  options.expect.forward = config.expect_forward;
  options.expect.backward = config.expect_backward;
  options.expect.given = config.expect_forward_given || config.expect_backward_given;
  // Bounded memory over any run length: the live check needs counts, not a full report.
  options.max_rows = 4;
  options.max_detailed = 2;
  options.max_violations = 4;
  impl_ = std::make_unique<Impl>(options);
  impl_->auditor.on_microbatch = [this](const v1::MicrobatchResult& row) { OnMicrobatch(row); };
  impl_->auditor.on_excess = [this](const v1::Event& update, v1::Pass, uint64_t) {
    if (first_excess_.empty()) first_excess_ = DescribeUpdate(update);
  };
}

bool LiveCheck::available() const { return true; }
void LiveCheck::OnHeader(const v1::TraceHeader& header) { impl_->auditor.OnHeader(header); }
void LiveCheck::OnEvent(const v1::Event& event) {
  impl_->auditor.OnEvent(event);  // may close the previous microbatch first
  if (Direction(event) >= 0) ++updates_seen_;
}
void LiveCheck::Finish(const v1::TraceFooter& footer) {
  impl_->auditor.OnFooter(footer);
  impl_->auditor.Finish();
}

#else  // Built without reports/ (fp8audit_auditor): no live check.

struct LiveCheck::Impl {};
LiveCheck::LiveCheck(const Config& config) : config_(config) {}
bool LiveCheck::available() const { return false; }
void LiveCheck::OnHeader(const v1::TraceHeader&) {}
void LiveCheck::OnEvent(const v1::Event&) {}
void LiveCheck::Finish(const v1::TraceFooter&) {}

#endif

LiveCheck::~LiveCheck() = default;

void LiveCheck::OnMicrobatch(const v1::MicrobatchResult& row) {
  ++microbatches_;
  const bool excess = row.forward_updates() > row.expected_forward() ||
                      row.backward_updates() > row.expected_backward();
  if (row.verdict() != v1::FAIL || (!excess && updates_seen_ == 0)) {
    first_excess_.clear();
    return;
  }
  if (failing_++ == 0) first_failure_ = DescribeFailure(row, first_excess_);
  first_excess_.clear();
}

}  // namespace fp8audit::agent
