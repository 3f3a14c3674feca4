// TE PR #3456's quantization_backward_scope() as the Python hook marks it (BACKWARD_SCOPE events:
// its outermost entry and exit). Under the PR only the outermost entry acts and its exit runs the
// one backward update, an amax all-reduce over the ranks: every rank must enter and leave it
// (docs/te-pr-3456.md, section 5). Two hazards, judged without tensor reads:
//   - per trace (OpenScope): the outermost scope entered and never left by the end of the trace,
//     a BACKWARD_SCOPE_OPEN violation naming the rank, the microbatch and where it was entered;
//   - per job (ScopeAgreement): in the same microbatch ranks left the scope different numbers of
//     times (MicrobatchResult.backward_scope_exits), some of them not at all: a job-level
//     BACKWARD_SCOPE_RANKS violation naming the ranks that entered it and those that did not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// What to do about either hazard, one line.
inline constexpr char kScopeRemedy[] =
    "enter te.quantization_backward_scope() on every rank and leave it on every rank, as "
    "autocast (its exit runs the backward update's amax all-reduce, which every rank joins)";

// Whether `event` is a BACKWARD_SCOPE exit (context "exit").
bool IsScopeExit(const v1::Event& event);

// One trace's outermost scope: open from an entry to the exit that follows it.
class OpenScope {
 public:
  // A BACKWARD_SCOPE event in the microbatch that will have index `microbatch`; `site`: where in
  // the job's code the hook said the thread's next event happened ("" not known).
  void On(const v1::Event& event, uint32_t microbatch, const std::string& site);
  bool open() const { return open_; }
  // The BACKWARD_SCOPE_OPEN violation of a scope still open at the end of the trace of `rank`
  // (-1: not a distributed job); `whole`: the trace has its footer (else the process ended
  // inside the scope, which the message says). Nothing while no scope is open.
  std::optional<v1::Violation> OpenViolation(int32_t rank, bool whole) const;

 private:
  bool open_ = false;
  uint32_t microbatch_ = 0;
  std::string site_;
};

// The job's ranks' scope exits per microbatch, for RankAgreement (reports/ranks.h).
class ScopeAgreement {
 public:
  static constexpr size_t kMaxRuns = size_t{1} << 20;  // runs kept in all; beyond, no comparison

  // Trace `trace` closed `row` (a whole microbatch: RankAgreement passes no incomplete one).
  void OnMicrobatch(size_t trace, const v1::MicrobatchResult& row);

  // The violations (job level, rank -1) over `speakers` (rank, trace index; sorted by rank): ranks
  // whose traces record TE PR #3456's scheduling (Recording.scheduling_semantics) or a scope exit,
  // compared microbatch by microbatch over those they have in common. At most `max_violations`
  // stretches (0: all), then one line counting the others.
  std::vector<v1::Violation> Judge(const std::vector<v1::RankReport>& traces,
                                   const std::vector<std::pair<int32_t, size_t>>& speakers,
                                   uint32_t max_violations) const;

 private:
  struct Run {
    uint32_t length;
    uint32_t exits;
  };
  struct Exits {
    std::vector<Run> runs;
    bool any = false;  // a scope exit in some microbatch
    bool stopped = false;
  };
  std::vector<Exits> exits_;
  size_t runs_ = 0;
};

// The job-level message for microbatches [first, end) where ranks left the scope `values` (rank,
// exits; sorted by rank) times.
std::string ScopeRanksMessage(uint64_t first, uint64_t end,
                              const std::vector<std::pair<int32_t, uint32_t>>& values);

}  // namespace fp8audit::reports
