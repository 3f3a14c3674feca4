#include "reports/baseline.h"

#include <algorithm>
#include <map>
#include <utility>

#include "reports/render_util.h"

namespace fp8audit::reports {
namespace {

struct Counts {
  uint32_t forward = 0, backward = 0, expected_forward = 1, expected_backward = 1;
  bool failing = false;
};

using Key = std::pair<int32_t, int64_t>;  // (rank key, microbatch index)

// Each trace's rank, or for traces without one -1000000 - their place among those.
std::map<Key, Counts> Microbatches(const v1::AuditReport& report) {
  std::map<Key, Counts> out;
  int32_t unranked = 0;
  for (const v1::RankReport& r : report.ranks()) {
    const int32_t key = r.rank() >= 0 ? r.rank() : -1000000 - unranked++;
    for (const v1::MicrobatchResult& m : r.microbatches()) {
      const uint32_t last = m.has_through_index() ? m.through_index() : m.index();
      for (uint32_t i = m.index(); i <= last && i >= m.index(); ++i) {
        out[{key, i}] = Counts{m.forward_updates(), m.backward_updates(), m.expected_forward(),
                               m.expected_backward(), m.verdict() == v1::FAIL};
      }
    }
  }
  return out;
}

uint64_t Distance(uint32_t n, uint32_t expected) {
  return n > expected ? n - expected : expected - n;
}

uint64_t Excess(const Counts& c, uint32_t f, uint32_t b) {
  return Distance(f, c.expected_forward) + Distance(b, c.expected_backward);
}

std::string PadLeft(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string Pair(uint32_t f, uint32_t b) { return std::to_string(f) + "/" + std::to_string(b); }

std::string Runs(const v1::AuditReport& r) {
  return OutcomeWord(r) + ", " + std::to_string(r.ranks_size()) +
         (r.ranks_size() == 1 ? " trace: " : " traces: ") + TotalsLine(r.totals());
}

}  // namespace

BaselineComparison CompareWithBaseline(const v1::AuditReport& base, const v1::AuditReport& now) {
  BaselineComparison c;
  const std::map<Key, Counts> before = Microbatches(base);
  const std::map<Key, Counts> after = Microbatches(now);
  for (const auto& [key, b] : before) {
    c.base_failing += b.failing;
    if (!after.contains(key)) ++c.only_baseline;
  }
  for (const auto& [key, a] : after) {
    c.failing += a.failing;
    auto it = before.find(key);
    if (it == before.end()) {
      ++c.only_here;
      continue;
    }
    const Counts& b = it->second;
    if (a.forward == b.forward && a.backward == b.backward) {
      ++c.unchanged;
      continue;
    }
    const uint64_t was = Excess(a, b.forward, b.backward), is = Excess(a, a.forward, a.backward);
    const int direction = is < was ? -1 : is > was ? 1 : 0;
    (direction < 0 ? c.better : direction > 0 ? c.worse : c.unchanged) += 1;
    const int32_t rank = key.first >= 0 ? key.first : -1;
    const auto index = static_cast<uint32_t>(key.second);
    if (!c.changes.empty()) {
      MicrobatchChange& last = c.changes.back();
      if (last.rank == rank && last.last + 1 == index && last.forward == a.forward &&
          last.backward == a.backward && last.base_forward == b.forward &&
          last.base_backward == b.backward) {
        last.last = index;
        continue;
      }
    }
    c.changes.push_back(MicrobatchChange{rank, index, index, b.forward, b.backward, a.forward,
                                         a.backward, a.expected_forward, a.expected_backward,
                                         direction});
  }
  c.worse_overall = c.worse > 0 || c.failing > c.base_failing;
  return c;
}

std::string RenderBaselineText(const v1::AuditReport& base, const v1::AuditReport& now,
                               const BaselineComparison& c, uint32_t max_rows) {
  std::string out = "fp8audit report: compared with a baseline\n";
  out += "  baseline  " + Runs(base) + "\n";
  out += "  this run  " + Runs(now) + "\n\n";
  if (c.changes.empty()) {
    out += "  every microbatch both runs have made the same updates\n";
  } else {
    out += "  rank  microbatch  baseline  this run  expected  change\n";
    size_t shown = 0;
    for (const MicrobatchChange& m : c.changes) {
      if (max_rows != 0 && shown++ == max_rows) {
        out += "  ... " + std::to_string(c.changes.size() - max_rows) +
               " more changed ranges (--max-rows 0 lists them all)\n";
        break;
      }
      const std::string rank = m.rank >= 0 ? std::to_string(m.rank) : "-";
      const std::string range =
          std::to_string(m.first) + (m.last > m.first ? "-" + std::to_string(m.last) : "");
      const char* change = m.direction < 0 ? "better" : m.direction > 0 ? "WORSE" : "as far";
      out += "  " + PadLeft(rank, 4) + "  " + PadLeft(range, 10) + "  " +
             PadLeft(Pair(m.base_forward, m.base_backward), 8) + "  " +
             PadLeft(Pair(m.forward, m.backward), 8) + "  " +
             PadLeft(Pair(m.expected_forward, m.expected_backward), 8) + "  " + change + "\n";
    }
  }
  out += "\n  microbatches: " + std::to_string(c.better) + " better, " + std::to_string(c.worse) +
         " worse, " + std::to_string(c.unchanged) + " as before";
  if (c.only_here > 0) out += ", " + std::to_string(c.only_here) + " only in this run";
  if (c.only_baseline > 0) out += ", " + std::to_string(c.only_baseline) + " only in the baseline";
  out += "; failing: " + std::to_string(c.failing) + " (baseline " +
         std::to_string(c.base_failing) + ")\n";
  out += c.worse_overall ? "WORSE than the baseline\n" : "not worse than the baseline\n";
  return out;
}

}  // namespace fp8audit::reports
