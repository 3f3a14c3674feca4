#include "reports/trace_set.h"

#include <google/protobuf/stubs/logging.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <unordered_map>

#include "proto/trace_io.h"
#include "reports/event_text.h"
#include "reports/frozen_scales.h"
#include "reports/next_step.h"
#include "reports/ranks.h"

namespace fp8audit::reports {
namespace {

constexpr uint64_t kProgressStepBytes = 256 << 10;  // TraceSetOptions::on_read

uint64_t SatAdd(uint64_t a, uint64_t b) { return a + b < a ? ~uint64_t{0} : a + b; }

Expectation Resolve(const TraceSetOptions& options, const v1::TraceHeader* header) {
  Expectation e;
  if (header != nullptr && header->has_expect_forward()) e.forward = header->expect_forward();
  if (header != nullptr && header->has_expect_backward()) e.backward = header->expect_backward();
  if (options.expect_forward) e.forward = *options.expect_forward;
  if (options.expect_backward) e.backward = *options.expect_backward;
  e.given = options.expect_forward || options.expect_backward ||
            (header != nullptr && (header->has_expect_forward() || header->has_expect_backward()));
  return e;
}

// Whether trace `r` expects updates: its expectation, unless its recipes have no global state
// updates (Recording.updates_not_expected).
bool ExpectsUpdates(const TraceSetOptions& options, const v1::RankReport& r) {
  if (r.recording().updates_not_expected()) return false;
  const Expectation e = Resolve(options, r.has_header() ? &r.header() : nullptr);
  return e.forward > 0 || e.backward > 0;
}

// Whether trace `r` has nothing to judge because its recipes have no global state updates and no
// module was recomputed (the one check made for them).
bool RecipesLeftNothing(const v1::RankReport& r) {
  return r.recording().updates_not_expected() && r.recording().recomputes_checked() == 0;
}

// The recipes the traces' modules ran under, each once, in order of name.
std::set<std::string> RecipeNames(const std::vector<v1::RankReport>& ranks) {
  std::set<std::string> names;
  for (const v1::RankReport& r : ranks) {
    names.insert(r.recording().recipes().begin(), r.recording().recipes().end());
  }
  return names;
}

// `names` as a reader says them: "A", "A and B", "A, B and C"; "its recipe" where there is none.
std::string RecipeList(const std::set<std::string>& names) {
  if (names.empty()) return "its recipe";
  std::string out;
  size_t i = 0;
  for (const std::string& name : names) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += name;
    ++i;
  }
  return out;
}

AuditorOptions MakeAuditorOptions(const TraceSetOptions& options, Expectation expect) {
  AuditorOptions o;
  o.expect = expect;
  o.max_rows = options.max_rows;
  o.fold_beyond = options.fold_beyond;
  o.max_detailed = options.max_detailed;
  o.max_violations = options.max_violations;
  o.semantics = options.semantics;
  return o;
}

bool IsDamaged(const v1::RankReport& r) {
  return std::any_of(r.violations().begin(), r.violations().end(), [](const v1::Violation& v) {
    return v.kind() == v1::Violation::TRACE_DAMAGED;
  });
}

// The trace holds violations the audit is sure of (RankReport.confirmed_violations).
bool HasConfirmedViolations(const v1::RankReport& r) { return r.confirmed_violations() > 0; }

// The trace cannot be judged in full: damaged, without a footer, or no backward pass observed.
bool IsIncomplete(const v1::RankReport& r) {
  return IsDamaged(r) || !r.damage().empty() || r.no_backward_observed() ||
         r.python_hook_absent() || r.children_without_agent_size() > 0 ||
         r.hook_unchecked_size() > 0;
}

// A report for a file that holds no audit at all (unreadable, empty, not a trace).
v1::RankReport Unreadable(const std::string& path, const std::string& why, std::string* problem) {
  Auditor auditor(MakeAuditorOptions(TraceSetOptions{}, Expectation{}));
  auditor.OnDamage(why);
  auditor.Finish();
  v1::RankReport r = auditor.report();
  r.set_path(path);
  if (problem != nullptr) *problem = path + ": " + why;
  return r;
}

// A trace of a job with nothing audited that expected updates: its microbatches are not judged
// (no verdict, none failing, no count violations), and neither is the trace.
void NotJudged(v1::RankReport* r) {
  r->set_outcome(v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  r->clear_verdict();
  r->mutable_totals()->clear_failing_microbatches();
  for (v1::MicrobatchResult& row : *r->mutable_microbatches()) row.clear_verdict();
  // Violations and findings of the counts go; the others stand.
  auto counted = [](const auto& v) {
    return v.kind() == v1::Violation::FORWARD_COUNT || v.kind() == v1::Violation::BACKWARD_COUNT;
  };
  auto* violations = r->mutable_violations();
  violations->erase(std::remove_if(violations->begin(), violations->end(), counted),
                    violations->end());
  auto* findings = r->mutable_findings();
  findings->erase(std::remove_if(findings->begin(), findings->end(), counted), findings->end());
}

// The job-level audit of traces already read: ranks, totals, outcome. `problems`: the lines of
// the traces that could not be read in full.
TraceSetResult Conclude(std::vector<v1::RankReport> ranks, const RankAgreement& agreement,
                        std::vector<std::string> problems, const TraceSetOptions& options) {
  TraceSetResult result;
  result.problems = std::move(problems);
  v1::AuditReport& report = result.report;
  report.set_schema_version(1);
  bool expects_updates = false;
  bool recipes_left_nothing = !ranks.empty();
  for (const v1::RankReport& r : ranks) {
    if (ExpectsUpdates(options, r)) expects_updates = true;
    if (!RecipesLeftNothing(r)) recipes_left_nothing = false;
  }
  const std::set<std::string> recipes =
      recipes_left_nothing ? RecipeNames(ranks) : std::set<std::string>{};
  const size_t traces_read = ranks.size();
  RankAgreement::Findings job = agreement.Judge(&ranks, options.max_violations);
  for (std::string& p : job.problems) result.problems.push_back(std::move(p));
  for (std::string& n : MixedJobNotes(ranks)) result.problems.push_back(std::move(n));
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const v1::RankReport& a, const v1::RankReport& b) {
                     if (a.rank() != b.rank()) return a.rank() < b.rank();
                     if (a.header().pid() != b.header().pid())
                       return a.header().pid() < b.header().pid();
                     return a.path() < b.path();
                   });

  v1::Totals* totals = report.mutable_totals();
  bool damaged = job.incomplete;
  bool violations = job.disagree;  // confirmed ones
  bool failing = job.disagree;     // any trace's verdict FAIL (damage and unconfirmed included)
  // Kernel launches: not counted anywhere when every trace's agent went without CUPTI.
  report.set_kernel_launches_not_counted(
      !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [](const v1::RankReport& r) {
        return r.recording().kernel_launches_not_counted();
      }));
  for (v1::RankReport& r : ranks) {
    const v1::Totals& t = r.totals();
    totals->set_microbatches(totals->microbatches() + t.microbatches());
    totals->set_forward_updates(SatAdd(totals->forward_updates(), t.forward_updates()));
    totals->set_backward_updates(SatAdd(totals->backward_updates(), t.backward_updates()));
    totals->set_events(SatAdd(totals->events(), t.events()));
    totals->set_kernel_launches(SatAdd(totals->kernel_launches(), t.kernel_launches()));
    if (IsIncomplete(r)) damaged = true;
    if (r.no_backward_observed()) result.problems.push_back(NoBackwardProblem(r));
    if (r.python_hook_absent()) result.problems.push_back(NoPythonHookProblem(r));
    for (const std::string& child : r.children_without_agent()) {
      result.problems.push_back(ChildWithoutAgentProblem(r, child));
    }
    for (const v1::HookUnchecked& u : r.hook_unchecked()) {
      result.problems.push_back(HookUncheckedProblem(r, u));
    }
    if (HasConfirmedViolations(r)) violations = true;
    if (r.verdict() == v1::FAIL) failing = true;
    *report.add_ranks() = std::move(r);
  }
  for (v1::Violation& v : job.violations) *report.add_violations() = std::move(v);
  for (v1::RankRange& m : job.missing) *report.add_missing_ranks() = std::move(m);

  const std::string traces = Plural(traces_read, "trace", "traces");
  const bool no_update = totals->forward_updates() == 0 && totals->backward_updates() == 0;
  const bool nothing = expects_updates && (totals->microbatches() == 0 || no_update);
  // A violation the audit is sure of decides, also where another trace is incomplete; where
  // nothing could be judged, violations (unbalanced markers) are not the job's outcome.
  if (violations && !nothing) {
    result.outcome = Outcome::kViolations;
  } else if (damaged) {
    result.outcome = Outcome::kIncomplete;
  } else if (expects_updates && totals->microbatches() == 0) {
    result.outcome = Outcome::kNothingAudited;
    result.problems.push_back(
        "nothing to audit: no microbatch in " + traces +
        " (no FP8 state update and no pass boundary was recorded; is the job using "
        "DelayedScaling, and do the agent's kernel patterns match it?)");
  } else if (expects_updates && no_update) {
    // Microbatches (pass boundaries, markers) but no update in any trace: the job's FP8 state is
    // not DelayedScaling's, or its updates were not recognised. Neither a pass nor a violation.
    result.outcome = Outcome::kNothingAudited;
    result.problems.push_back(
        "nothing to judge: " + Plural(totals->microbatches(), "microbatch", "microbatches") +
        " in " + traces +
        " and not one FP8 state update: the job does not use DelayedScaling (plain PyTorch, "
        "torch._scaled_mm, another recipe), or Transformer Engine runs its unfused update path "
        "(NVTE_UNFUSED_FP8_UPDATE=1) and the Python hook did not record it (--no-python-hook), "
        "or its update kernels have names the agent's patterns do not know: record again with "
        "`fp8audit run` (its Python hook counts TE's updates), or with `--patterns FILE` naming "
        "the kernels (for a job meant to make no updates: --expect-forward 0 "
        "--expect-backward 0)");
  } else if (violations || failing) {
    result.outcome = Outcome::kViolations;
  } else if (recipes_left_nothing) {
    result.outcome = Outcome::kNothingAudited;
    result.problems.push_back(
        "nothing to judge: the job's Transformer Engine modules ran under " + RecipeList(recipes) +
        (recipes.size() > 1 ? ", which have" : ", which has") +
        " no global FP8 state updates to count, and no module was recomputed in "
        "backward (the check made for such recipes: a recompute in its forward's FP8 state)");
  } else {
    result.outcome = Outcome::kPass;
  }
  // Each trace's outcome, with the job's.
  totals->clear_failing_microbatches();
  for (v1::RankReport& r : *report.mutable_ranks()) {
    if (result.outcome == Outcome::kNothingAudited &&
        (ExpectsUpdates(options, r) || RecipesLeftNothing(r))) {
      NotJudged(&r);
    } else if (HasConfirmedViolations(r)) {
      r.set_outcome(v1::AuditReport::OUTCOME_VIOLATIONS);
    } else if (IsIncomplete(r)) {
      r.set_outcome(v1::AuditReport::OUTCOME_INCOMPLETE);
    } else {
      r.set_outcome(r.verdict() == v1::FAIL ? v1::AuditReport::OUTCOME_VIOLATIONS
                                            : v1::AuditReport::OUTCOME_PASS);
    }
    totals->set_failing_microbatches(totals->failing_microbatches() +
                                     r.totals().failing_microbatches());
  }
  // Nothing audited is neither a pass nor a failure: no verdict.
  if (result.outcome != Outcome::kNothingAudited) {
    report.set_verdict(violations || failing || damaged ? v1::FAIL : v1::PASS);
  }
  switch (result.outcome) {
    case Outcome::kIncomplete:
      report.set_outcome(v1::AuditReport::OUTCOME_INCOMPLETE);
      break;
    case Outcome::kNothingAudited:
      report.set_outcome(v1::AuditReport::OUTCOME_NOTHING_AUDITED);
      break;
    case Outcome::kViolations:
      report.set_outcome(v1::AuditReport::OUTCOME_VIOLATIONS);
      break;
    case Outcome::kPass:
      report.set_outcome(v1::AuditReport::OUTCOME_PASS);
      break;
  }
  for (const std::string& p : result.problems) report.add_problems(p);
  report.set_next_step(NextStep(report));
  return result;
}

}  // namespace

v1::RankReport AuditTraceFile(const std::string& path, const TraceSetOptions& options,
                              std::string* problem) {
  // A damaged record is reported once, by us: protobuf's own log lines (e.g. on invalid UTF-8)
  // would only repeat it on stderr.
  google::protobuf::LogSilencer quiet;
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  if (reader == nullptr) {
    // Open's message already starts with the path.
    const std::string why =
        error.rfind(path + ": ", 0) == 0 ? error.substr(path.size() + 2) : error;
    return Unreadable(path, "cannot read: " + why, problem);
  }
  if (reader->file_size() == 0) {
    return Unreadable(path,
                      "empty trace (0 bytes): the process ended just after the agent created "
                      "it, before its header was written (killed?)",
                      problem);
  }
  v1::TraceRecord record;
  TraceFileReader::Status status = reader->Next(&record);
  if (status == TraceFileReader::Status::kDamaged) {
    return Unreadable(path, "not a readable trace: " + reader->damage(), problem);
  }
  if (status != TraceFileReader::Status::kRecord || !record.has_header()) {
    return Unreadable(path, "not an fp8audit trace: the first record is not a header", problem);
  }

  if (record.header().schema_version() == 0) {
    return Unreadable(path,
                      "not an fp8audit trace: its header's schema version is 0 (fp8audit's "
                      "traces have 1 or later)",
                      problem);
  }
  if (record.header().schema_version() > kTraceSchemaVersion) {
    return Unreadable(path,
                      "written by a newer fp8audit (trace schema version " +
                          std::to_string(record.header().schema_version()) +
                          "; this one reads up to " + std::to_string(kTraceSchemaVersion) +
                          "): read it with that version",
                      problem);
  }

  Auditor auditor(MakeAuditorOptions(options, Resolve(options, &record.header())));
  auditor.on_microbatch = options.on_microbatch;
  TraceObserver* observer = options.observer;
  if (observer != nullptr) {
    auditor.on_update = [observer](const CountedUpdate& u) { observer->OnUpdate(u); };
    auditor.on_microbatch_span = [observer](const v1::MicrobatchResult& row,
                                            const MicrobatchSpan& span) {
      observer->OnMicrobatch(row, span);
    };
    auditor.on_violation = [observer](const v1::Violation& v) { observer->OnViolation(v); };
    observer->OnHeader(record.header());
  }
  auditor.OnHeader(record.header());
  std::string damage;
  bool misplaced = false;  // the damage is a whole record in the wrong place
  bool footer_seen = false;
  uint64_t event_records = 0;
  // Records were lost, repeated or added anywhere in the file: no count in it is the writer's.
  bool counts_unreliable = false;
  uint64_t next_progress = 0;
  while (true) {
    const uint64_t offset = reader->bytes_consumed();
    if (options.on_read && offset >= next_progress) {
      options.on_read(offset);
      next_progress = offset + kProgressStepBytes;
    }
    status = reader->Next(&record);
    if (status == TraceFileReader::Status::kEnd) break;
    if (status == TraceFileReader::Status::kDamaged) {
      damage = reader->damage();
      break;
    }
    if (record.has_header() || footer_seen) {
      // A second header (two traces concatenated), or anything after the footer, which a writer
      // writes last: the writer went wrong, or files were joined.
      damage = "record " + std::to_string(reader->records()) + " at byte " +
               std::to_string(offset) + ": " +
               (record.has_header() ? "a second header" : "a record after the footer");
      misplaced = true;
      break;
    }
    if (record.has_footer()) {
      footer_seen = true;
      // The footer counts the event records its writer wrote: any other number read means
      // records were lost, repeated or added since.
      if (record.footer().events() != event_records) {
        damage = "record " + std::to_string(reader->records()) + " at byte " +
                 std::to_string(offset) + ": the footer counts " +
                 std::to_string(record.footer().events()) + " events, the trace holds " +
                 std::to_string(event_records) + " (event records lost, repeated or added)";
        misplaced = true;
        counts_unreliable = true;
        auditor.OnRecord(record);
        break;
      }
    }
    if (record.has_event()) ++event_records;
    if (observer != nullptr && record.has_event()) observer->OnEvent(record.event());
    auditor.OnRecord(record);
  }
  if (options.on_read) options.on_read(reader->bytes_consumed());
  if (!damage.empty()) auditor.OnDamage(damage);
  const bool footer_missing = damage.empty() && !footer_seen;
  const uint64_t whole_microbatches = footer_missing ? auditor.OnMissingFooter() : 0;
  auditor.Finish();
  v1::RankReport r = std::move(*auditor.mutable_report());  // not a copy: rows can be many
  r.set_path(path);
  if (counts_unreliable) r.set_confirmed_violations(0);  // its violations may be the damage's
  if (problem != nullptr) {
    if (!damage.empty()) {
      const uint64_t whole = reader->records() - (misplaced ? 1 : 0);
      *problem = path + ": trace damaged at " + damage + "; the " + std::to_string(whole) +
                 " whole records before it are reported";
    } else if (footer_missing) {
      *problem = path + ": " + r.damage();
      if (whole_microbatches > 0) {
        *problem += "; the " +
                    Plural(whole_microbatches, "whole microbatch", "whole microbatches") +
                    " before it " + (whole_microbatches == 1 ? "is" : "are") + " reported";
      }
    } else if (IsDamaged(r)) {
      for (const v1::Violation& v : r.violations()) {
        if (v.kind() == v1::Violation::TRACE_DAMAGED) *problem = path + ": " + v.message();
      }
    }
  }
  return r;
}

TraceSetResult AuditTraceFiles(const std::vector<std::string>& files,
                               const TraceSetOptions& options) {
  std::vector<std::string> problems;
  std::vector<v1::RankReport> ranks;
  ranks.reserve(files.size());
  RankAgreement agreement;
  if (options.observer != nullptr && options.observer->WantsClocks()) {
    options.observer->OnClocks(AlignClocks(files));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    TraceSetOptions one = options;
    uint64_t read = 0;
    if (options.on_progress) {
      options.on_progress(i, 0, false);
      one.on_read = [&](uint64_t bytes) {
        read = bytes;
        options.on_progress(i, bytes, false);
        if (options.on_read) options.on_read(bytes);
      };
    }
    one.on_microbatch = [&](const v1::MicrobatchResult& row) {
      agreement.OnMicrobatch(i, row);
      if (options.on_microbatch) options.on_microbatch(row);
    };
    std::string problem;
    if (options.observer != nullptr) options.observer->OnTrace(i, files[i]);
    ranks.push_back(AuditTraceFile(files[i], one, &problem));
    if (options.observer != nullptr) options.observer->OnTraceEnd(ranks.back());
    if (options.on_progress) options.on_progress(i, read, true);
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  TraceSetResult result = Conclude(std::move(ranks), agreement, std::move(problems), options);
  std::unordered_map<std::string, v1::AuditReport::Outcome> by_path;
  for (const v1::RankReport& r : result.report.ranks()) by_path.emplace(r.path(), r.outcome());
  result.file_outcomes.reserve(files.size());
  for (const std::string& file : files) {
    auto it = by_path.find(file);
    result.file_outcomes.push_back(it != by_path.end() ? it->second
                                                       : v1::AuditReport::OUTCOME_UNSPECIFIED);
  }
  return result;
}

TraceSetResult AuditRankReports(std::vector<v1::RankReport> ranks, const TraceSetOptions& options) {
  RankAgreement agreement;
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (const v1::MicrobatchResult& row : ranks[i].microbatches()) agreement.OnMicrobatch(i, row);
  }
  return Conclude(std::move(ranks), agreement, {}, options);
}
}  // namespace fp8audit::reports
