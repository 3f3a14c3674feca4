#include "reports/ranks.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

constexpr const char* kIncompletePrefix = "incomplete:";  // Auditor's note on such a row

bool IsDamaged(const v1::RankReport& r) {
  if (!r.damage().empty()) return true;
  return std::any_of(r.violations().begin(), r.violations().end(), [](const v1::Violation& v) {
    return v.kind() == v1::Violation::TRACE_DAMAGED;
  });
}

v1::Violation JobViolation(std::string message, uint32_t microbatch = 0) {
  v1::Violation v;
  v.set_kind(v1::Violation::RANK_DISAGREEMENT);
  v.set_rank(-1);
  v.set_microbatch(microbatch);
  v.set_message(std::move(message));
  return v;
}

// "rank 0: 1/1; ranks 1-3: 2/3": ranks grouped by their value, groups in order of their lowest
// rank. `values` is sorted by rank.
template <typename T, typename Text>
std::string Grouped(const std::vector<std::pair<int32_t, T>>& values, Text text) {
  std::vector<std::pair<T, std::vector<int32_t>>> groups;
  for (const auto& entry : values) {
    const T& value = entry.second;  // a plain reference: clang 14 cannot capture a binding
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
    if (it == groups.end()) {
      groups.push_back({value, {entry.first}});
    } else {
      it->second.push_back(entry.first);
    }
  }
  std::string out;
  for (const auto& [value, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += RankList(ranks) + ": " + text(value);
  }
  return out;
}

// The value most of some values hold. A value agrees with most when it is that value and no other
// value is held as often; without such a majority, no value agrees.
template <typename T>
class Majority {
 public:
  explicit Majority(std::vector<T> values) {
    std::sort(values.begin(), values.end());
    size_t best = 0;
    for (size_t i = 0; i < values.size();) {
      size_t j = i;
      while (j < values.size() && values[j] == values[i]) ++j;
      if (j - i > best) {
        best = j - i;
        most_ = values[i];
        unique_ = true;
      } else if (j - i == best) {
        unique_ = false;
      }
      i = j;
    }
  }
  bool Agrees(const T& value) const { return unique_ && value == most_; }

 private:
  T most_{};
  bool unique_ = false;
};

// Differing ranges kept per trace; beyond, they are only counted.
constexpr int kMaxDifferingRanges = 1000;

// Microbatches first..end-1 differ: merged into the last range when they continue it.
void AddDiffering(uint64_t first, uint64_t end, v1::RankStanding* standing) {
  standing->set_differing_microbatches(standing->differing_microbatches() + (end - first));
  const auto last = static_cast<uint32_t>(std::min<uint64_t>(end - 1, UINT32_MAX));
  const int n = standing->differing_size();
  if (n > 0 && static_cast<uint64_t>(standing->differing(n - 1).last()) + 1 == first) {
    standing->mutable_differing(n - 1)->set_last(last);
  } else if (n < kMaxDifferingRanges) {
    v1::MicrobatchRange* r = standing->add_differing();
    r->set_first(static_cast<uint32_t>(std::min<uint64_t>(first, UINT32_MAX)));
    r->set_last(last);
  }
}

std::string MicrobatchRange(uint64_t first, uint64_t end) {
  return end - first == 1 ? "microbatch " + std::to_string(first)
                          : "microbatches " + std::to_string(first) + "-" + std::to_string(end - 1);
}

}  // namespace

int32_t RankFromFileName(const std::string& path) {
  const std::string suffix = ".fp8trace";
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() < suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  name.resize(name.size() - suffix.size());
  const size_t at = name.rfind(".rank");
  if (at == std::string::npos) return -1;
  const std::string digits = name.substr(at + 5);
  if (digits.empty() || digits.size() > 10 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  const uint64_t n = std::stoull(digits);
  return n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) ? -1
                                                                        : static_cast<int32_t>(n);
}

int32_t ClaimedRank(const v1::RankReport& r) {
  if (r.has_header() && r.header().parent_pid() != 0) return -1;
  return r.rank() >= 0 ? r.rank() : -1;
}

bool HoldsAnAudit(const v1::RankReport& r) {
  return !r.has_header() || r.totals().microbatches() > 0 || IsDamaged(r);
}

std::vector<v1::RankRange> MissingRanks(std::vector<int32_t> present) {
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());
  std::vector<v1::RankRange> missing;
  int64_t next = 0;  // the lowest rank not yet accounted for (past INT32_MAX after it)
  for (int32_t rank : present) {
    if (rank < 0) continue;
    if (rank > next) {
      v1::RankRange range;
      range.set_first(static_cast<int32_t>(next));
      range.set_last(rank - 1);
      missing.push_back(range);
    }
    next = int64_t{rank} + 1;
  }
  return missing;
}

uint64_t RankCount(const std::vector<v1::RankRange>& ranges) {
  uint64_t n = 0;
  for (const v1::RankRange& r : ranges) {
    n += static_cast<uint64_t>(static_cast<int64_t>(r.last()) - r.first() + 1);
  }
  return n;
}

std::string RangeList(const std::vector<v1::RankRange>& ranges) {
  const bool one = ranges.size() == 1 && ranges[0].first() == ranges[0].last();
  std::string out = one ? "rank " : "ranks ";
  size_t listed = 0;
  for (; listed < ranges.size() && listed < kMaxListedRanges; ++listed) {
    const v1::RankRange& r = ranges[listed];
    if (listed > 0) out += ", ";
    out += std::to_string(r.first());
    if (int64_t{r.last()} == int64_t{r.first()} + 1) {
      out += ", " + std::to_string(r.last());
    } else if (r.last() > r.first()) {
      out += "-" + std::to_string(r.last());
    }
  }
  if (listed < ranges.size()) {
    const std::vector<v1::RankRange> rest(ranges.begin() + static_cast<ptrdiff_t>(listed),
                                          ranges.end());
    out += " and " + std::to_string(RankCount(rest)) + " more in " + std::to_string(rest.size()) +
           " ranges";
  }
  return out;
}

std::string RankList(const std::vector<int32_t>& ranks) {
  std::vector<int32_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<v1::RankRange> ranges;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    // A run of two reads better as two ranks ("0, 1"): two ranges.
    if (j - i == 1) j = i;
    v1::RankRange r;
    r.set_first(sorted[i]);
    r.set_last(sorted[j]);
    ranges.push_back(r);
    i = j + 1;
  }
  return RangeList(ranges);
}

std::string RangeText(const v1::RankRange& range) {
  return range.first() == range.last()
             ? std::to_string(range.first())
             : std::to_string(range.first()) + "-" + std::to_string(range.last());
}

std::string MoreMissingRanks(const v1::AuditReport& report) {
  const int n = report.missing_ranks_size();
  if (n <= static_cast<int>(kMaxListedRanges)) return "";
  const std::vector<v1::RankRange> rest(report.missing_ranks().begin() + kMaxListedRanges,
                                        report.missing_ranks().end());
  return std::to_string(rest.size()) + " more ranges of missing ranks (" +
         std::to_string(RankCount(rest)) + " ranks)";
}

RankRowList RankRows(const v1::AuditReport& report) {
  RankRowList list;
  std::vector<RankRow>& rows = list.rows;
  int next_missing = 0;
  const int listed = std::min(report.missing_ranks_size(), static_cast<int>(kMaxListedRanges));
  auto missing_before = [&](int64_t rank) {
    for (; next_missing < listed && report.missing_ranks(next_missing).first() < rank;
         ++next_missing) {
      const v1::RankRange& m = report.missing_ranks(next_missing);
      const uint64_t n = static_cast<uint64_t>(static_cast<int64_t>(m.last()) - m.first() + 1);
      rows.push_back(RankRow{m.first(), m.last(), -1,
                             n == 1 ? "no trace" : "no trace (" + std::to_string(n) + " ranks)"});
    }
  };
  for (int i = 0; i < report.ranks_size(); ++i) {
    const v1::RankReport& r = report.ranks(i);
    if (r.rank() >= 0) missing_before(r.rank());
    std::vector<std::string> notes;
    if (!r.has_header()) notes.push_back("no header");
    if (r.header().parent_pid() != 0) {
      notes.push_back("forked from pid " + std::to_string(r.header().parent_pid()));
    }
    // A damaged trace with a known violation: FAIL, and incomplete (without one its verdict word
    // is INCOMPLETE already).
    if (r.has_header() && IsDamaged(r) && r.outcome() != v1::AuditReport::OUTCOME_INCOMPLETE) {
      notes.push_back("incomplete");
    }
    if (r.standing().claimed_by() > 1) {
      notes.push_back("claimed by " + std::to_string(r.standing().claimed_by()) + " traces");
    }
    if (r.has_header() && !IsDamaged(r) && r.totals().microbatches() == 0) {
      notes.push_back("no microbatches");
    }
    if (const int n = r.children_without_agent_size(); n > 0) {
      notes.push_back(n == 1 ? "started a program without the agent"
                             : "started " + std::to_string(n) + " programs without the agent");
    }
    if (const int n = r.hook_unchecked_size(); n > 0) {
      notes.push_back(n == 1 ? "a hook check did not run"
                             : std::to_string(n) + " hook checks did not run");
    }
    std::string note;
    for (const std::string& n : notes) note += (note.empty() ? "" : ", ") + n;
    rows.push_back(RankRow{r.rank(), r.rank(), i, std::move(note)});
  }
  missing_before(int64_t{1} << 32);
  list.missing_note = MoreMissingRanks(report);
  return list;
}

void RankAgreement::OnMicrobatch(size_t trace, const v1::MicrobatchResult& row) {
  for (const std::string& e : row.explanations()) {
    if (e.rfind(kIncompletePrefix, 0) == 0) return;
  }
  scope_.OnMicrobatch(trace, row);
  if (counts_.size() <= trace) counts_.resize(trace + 1);
  Counts& c = counts_[trace];
  if (c.stopped) return;
  if (!c.runs.empty()) {
    Run& last = c.runs.back();
    if (last.forward == row.forward_updates() && last.backward == row.backward_updates() &&
        last.length < std::numeric_limits<uint32_t>::max()) {
      ++last.length;
      ++c.rows;
      return;
    }
  }
  if (runs_ >= kMaxRuns) {
    c.stopped = true;
    return;
  }
  c.runs.push_back(Run{1, row.forward_updates(), row.backward_updates()});
  ++runs_;
  ++c.rows;
}

RankAgreement::Findings RankAgreement::Judge(std::vector<v1::RankReport>* traces,
                                             uint32_t max_violations) const {
  Findings f;
  for (v1::RankReport& r : *traces) {
    if (!r.has_header() && r.rank() < 0) r.set_rank(RankFromFileName(r.path()));
  }

  // Which trace speaks for each rank.
  std::map<int32_t, std::vector<size_t>> claims, holders;
  for (size_t i = 0; i < traces->size(); ++i) {
    const int32_t rank = ClaimedRank((*traces)[i]);
    if (rank < 0) continue;
    claims[rank].push_back(i);
    if (HoldsAnAudit((*traces)[i])) holders[rank].push_back(i);
  }
  std::vector<std::pair<int32_t, size_t>> speakers;  // rank, trace; sorted by rank
  for (const auto& [rank, all] : claims) {
    const std::vector<size_t>& held = holders[rank];
    if (held.size() > 1) {
      std::string which;
      for (size_t i : held) {
        const v1::RankReport& r = (*traces)[i];
        if (!which.empty()) which += ", ";
        which += r.path() + " (pid " + std::to_string(r.header().pid()) + ", " +
                 std::to_string(r.totals().microbatches()) + " microbatches)";
      }
      const std::string line =
          "rank " + std::to_string(rank) + " is claimed by " + std::to_string(held.size()) +
          " traces: " + which +
          "; traces of more than one run or of a restarted worker, or processes that share one "
          "RANK: the audit cannot tell which is the rank's (audit one run's traces)";
      f.problems.push_back(line);
      f.violations.push_back(JobViolation(line));
      f.incomplete = true;
      for (size_t i : held) {
        (*traces)[i].mutable_standing()->set_claimed_by(static_cast<uint32_t>(held.size()));
      }
      continue;
    }
    speakers.emplace_back(rank, held.empty() ? all.front() : held.front());
  }

  std::vector<int32_t> present;
  for (const auto& [rank, all] : claims) present.push_back(rank);
  f.missing = MissingRanks(present);
  if (!f.missing.empty()) {
    const bool one = RankCount(f.missing) == 1;
    std::string line = "no trace of " + RangeList(f.missing) + " (";
    if (!one) line += std::to_string(RankCount(f.missing)) + " ranks; ";
    line += "traces of " + RankList(present) + "): the audit is incomplete; " +
            (one ? "did that rank write its trace elsewhere, or end before its first kernel "
                   "launch?"
                 : "did those ranks write their traces elsewhere, or end before their first "
                   "kernel launch?");
    f.problems.push_back(line);
    f.violations.push_back(JobViolation(line));
    f.incomplete = true;
  }

  // The number of microbatches, over the ranks whose traces are whole.
  std::vector<std::pair<int32_t, uint64_t>> totals;
  std::vector<size_t> whole;  // their traces
  for (const auto& [rank, i] : speakers) {
    if (IsDamaged((*traces)[i])) continue;
    totals.emplace_back(rank, (*traces)[i].totals().microbatches());
    whole.push_back(i);
  }
  if (std::any_of(totals.begin(), totals.end(),
                  [&](const auto& t) { return t.second != totals.front().second; })) {
    f.violations.push_back(
        JobViolation("ranks disagree on the number of microbatches (" +
                     Grouped(totals, [](uint64_t n) { return std::to_string(n); }) + ")"));
    f.disagree = true;
    std::vector<uint64_t> counts;
    for (const auto& t : totals) counts.push_back(t.second);
    const Majority<uint64_t> most(counts);
    for (size_t k = 0; k < whole.size(); ++k) {
      if (!most.Agrees(totals[k].second)) {
        (*traces)[whole[k]].mutable_standing()->set_count_differs(true);
      }
    }
  }

  // The updates in each microbatch, over the microbatches that ranks have in common: walks the
  // runs of every rank together, one stretch of unchanged counts at a time.
  struct Cursor {
    int32_t rank;
    size_t trace;
    const Counts* counts;
    size_t run = 0;
    uint64_t left = 0;  // microbatches left in the current run
  };
  static const Counts kNone;
  std::vector<Cursor> cursors;
  for (const auto& [rank, i] : speakers) {
    const Counts* c = i < counts_.size() ? &counts_[i] : &kNone;
    cursors.push_back(Cursor{rank, i, c, 0, c->runs.empty() ? 0 : c->runs[0].length});
  }
  uint64_t index = 0;
  uint64_t ranges = 0, hidden_ranges = 0, hidden_microbatches = 0, last_hidden = 0;
  using Pair = std::pair<uint32_t, uint32_t>;
  while (cursors.size() >= 2) {
    std::vector<Cursor*> active;
    for (Cursor& c : cursors) {
      if (c.run < c.counts->runs.size()) active.push_back(&c);
    }
    if (active.size() < 2) break;
    uint64_t end = std::numeric_limits<uint64_t>::max();
    std::vector<std::pair<int32_t, Pair>> values;
    for (const Cursor* c : active) {
      end = std::min(end, index + c->left);
      const Run& run = c->counts->runs[c->run];
      values.emplace_back(c->rank, Pair{run.forward, run.backward});
    }
    if (std::any_of(values.begin(), values.end(),
                    [&](const auto& v) { return v.second != values.front().second; })) {
      f.disagree = true;
      // Each trace's standing: where it is not with most ranks.
      std::vector<Pair> pairs;
      for (const auto& v : values) pairs.push_back(v.second);
      const Majority<Pair> most(pairs);
      for (size_t k = 0; k < active.size(); ++k) {
        if (most.Agrees(pairs[k])) continue;
        AddDiffering(index, end, (*traces)[active[k]->trace].mutable_standing());
      }
      ++ranges;
      if (max_violations == 0 || ranges <= max_violations) {
        f.violations.push_back(JobViolation(
            "ranks disagree in " + MicrobatchRange(index, end) + " (forward/backward updates): " +
                Grouped(values,
                        [](const Pair& p) {
                          return std::to_string(p.first) + "/" + std::to_string(p.second);
                        }),
            static_cast<uint32_t>(
                std::min<uint64_t>(index, std::numeric_limits<uint32_t>::max()))));
      } else {
        ++hidden_ranges;
        hidden_microbatches += end - index;
        last_hidden = end - 1;
      }
    }
    for (Cursor* c : active) {
      c->left -= end - index;
      if (c->left == 0 && ++c->run < c->counts->runs.size())
        c->left = c->counts->runs[c->run].length;
    }
    index = end;
  }
  if (hidden_ranges > 0) {
    f.violations.push_back(JobViolation(
        "ranks also disagree in " + std::to_string(hidden_microbatches) + " more microbatches (" +
        std::to_string(hidden_ranges) + " more stretches, the last ending at microbatch " +
        std::to_string(last_hidden) + ")"));
  }
  // Ranks that did not all leave TE PR #3456's backward scope alike: a violation, as disagreeing
  // counts are.
  for (v1::Violation& v : scope_.Judge(*traces, speakers, max_violations)) {
    f.violations.push_back(std::move(v));
    f.disagree = true;
  }
  return f;
}

std::vector<std::string> MixedJobNotes(const std::vector<v1::RankReport>& traces) {
  std::vector<std::string> notes;
  std::map<std::string, size_t> versions;
  std::map<std::pair<std::string, uint32_t>, std::set<int32_t>> ranks_of;  // (host, pid)
  for (const v1::RankReport& r : traces) {
    if (!r.recording().te_version().empty()) ++versions[r.recording().te_version()];
    if (r.has_header() && r.rank() >= 0 && r.header().pid() != 0) {
      ranks_of[{r.header().host(), r.header().pid()}].insert(r.rank());
    }
  }
  if (versions.size() > 1) {
    std::string list;
    for (const auto& [version, n] : versions) {
      list += (list.empty() ? "" : ", ") + Printable(version, 64) + " (" +
              Plural(n, "trace", "traces") + ")";
    }
    notes.push_back("these traces record " + std::to_string(versions.size()) +
                    " Transformer Engine versions: " + list +
                    "; the ranks of one job run one TE: traces of different runs or environments? "
                    "(--run reads one run)");
  }
  for (const auto& [process, ranks] : ranks_of) {
    if (ranks.size() < 2) continue;
    std::string list;
    for (int32_t rank : ranks) list += (list.empty() ? "" : ", ") + std::to_string(rank);
    notes.push_back("one process, pid " + std::to_string(process.second) + " on " +
                    Printable(process.first, 128) + ", wrote the traces of ranks " + list +
                    ": a process is one rank (a reused pid, traces of different runs, or a job "
                    "that changed RANK as it ran?)");
  }
  return notes;
}

}  // namespace fp8audit::reports
