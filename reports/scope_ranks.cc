#include <algorithm>
#include <limits>
#include <string>

#include "reports/backward_scope.h"
#include "reports/event_text.h"
#include "reports/ranks.h"

// ScopeAgreement (reports/backward_scope.h): the job-level half, beside RankAgreement.
namespace fp8audit::reports {
namespace {

std::string Microbatches(uint64_t first, uint64_t end) {
  return end - first == 1 ? "microbatch " + std::to_string(first)
                          : "microbatches " + std::to_string(first) + "-" + std::to_string(end - 1);
}

v1::Violation ScopeRanks(uint64_t microbatch, std::string message) {
  v1::Violation v;
  v.set_kind(v1::Violation::BACKWARD_SCOPE_RANKS);
  v.set_rank(-1);
  v.set_microbatch(
      static_cast<uint32_t>(std::min<uint64_t>(microbatch, std::numeric_limits<uint32_t>::max())));
  v.set_message(std::move(message));
  return v;
}

}  // namespace

void ScopeAgreement::OnMicrobatch(size_t trace, const v1::MicrobatchResult& row) {
  if (exits_.size() <= trace) exits_.resize(trace + 1);
  Exits& e = exits_[trace];
  if (e.stopped) return;
  const uint32_t n = row.backward_scope_exits();
  if (n > 0) e.any = true;
  if (!e.runs.empty() && e.runs.back().exits == n &&
      e.runs.back().length < std::numeric_limits<uint32_t>::max()) {
    ++e.runs.back().length;
    return;
  }
  if (runs_ >= kMaxRuns) {
    e.stopped = true;
    return;
  }
  e.runs.push_back(Run{1, n});
  ++runs_;
}

std::string ScopeRanksMessage(uint64_t first, uint64_t end,
                              const std::vector<std::pair<int32_t, uint32_t>>& values) {
  std::vector<int32_t> entered, not_entered;
  for (const auto& [rank, n] : values) (n > 0 ? entered : not_entered).push_back(rank);
  std::string message = Microbatches(first, end) + ": ";
  if (!entered.empty() && !not_entered.empty()) {
    // Exits are what the ranks are compared on: a rank that entered and never left did not.
    message +=
        "quantization_backward_scope not entered and left on every rank: " + RankList(entered) +
        " did, " + RankList(not_entered) + " did not";
  } else {
    std::string counts;
    for (const auto& [rank, n] : values) {
      counts += (counts.empty() ? "" : ", ") + ("rank " + std::to_string(rank)) + ": " +
                std::to_string(n);
    }
    message +=
        "ranks left quantization_backward_scope a different number of times (" + counts + ")";
  }
  return message + "; " + kScopeRemedy;
}

std::vector<v1::Violation> ScopeAgreement::Judge(
    const std::vector<v1::RankReport>& traces,
    const std::vector<std::pair<int32_t, size_t>>& speakers, uint32_t max_violations) const {
  struct Cursor {
    int32_t rank;
    const Exits* exits;
    size_t run = 0;
    uint64_t left = 0;  // microbatches left in the current run
  };
  std::vector<Cursor> cursors;
  for (const auto& [rank, i] : speakers) {
    if (i >= exits_.size() || i >= traces.size()) continue;
    const Exits& e = exits_[i];
    if (!e.any && traces[i].recording().scheduling_semantics().empty()) continue;
    cursors.push_back(Cursor{rank, &e, 0, e.runs.empty() ? 0 : e.runs[0].length});
  }
  std::vector<v1::Violation> out;
  if (std::none_of(cursors.begin(), cursors.end(), [](const Cursor& c) { return c.exits->any; })) {
    return out;  // no rank left the scope: nothing to compare (a TE without it, or none used)
  }
  uint64_t index = 0, stretches = 0, hidden = 0;
  while (true) {
    std::vector<Cursor*> active;
    for (Cursor& c : cursors) {
      if (c.run < c.exits->runs.size()) active.push_back(&c);
    }
    if (active.size() < 2) break;
    uint64_t end = std::numeric_limits<uint64_t>::max();
    std::vector<std::pair<int32_t, uint32_t>> values;
    for (const Cursor* c : active) {
      end = std::min(end, index + c->left);
      values.emplace_back(c->rank, c->exits->runs[c->run].exits);
    }
    if (std::any_of(values.begin(), values.end(),
                    [&](const auto& v) { return v.second != values.front().second; })) {
      if (max_violations == 0 || ++stretches <= max_violations) {
        out.push_back(ScopeRanks(index, ScopeRanksMessage(index, end, values)));
      } else {
        hidden += end - index;
      }
    }
    for (Cursor* c : active) {
      c->left -= end - index;
      if (c->left == 0 && ++c->run < c->exits->runs.size()) c->left = c->exits->runs[c->run].length;
    }
    index = end;
  }
  if (hidden > 0) {
    out.push_back(ScopeRanks(
        index, "quantization_backward_scope also not entered alike on every rank in " +
                   Plural(hidden, "more microbatch", "more microbatches") + "; " + kScopeRemedy));
  }
  return out;
}

}  // namespace fp8audit::reports
