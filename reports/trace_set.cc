#include "reports/trace_set.h"

#include <google/protobuf/stubs/logging.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "proto/trace_io.h"
#include "reports/event_text.h"
#include "reports/ranks.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTraceExtension = ".fp8trace";
constexpr uint64_t kProgressStepBytes = 256 << 10;  // TraceSetOptions::on_read

uint64_t SatAdd(uint64_t a, uint64_t b) { return a + b < a ? ~uint64_t{0} : a + b; }

bool HasTraceExtension(const fs::path& p) { return p.extension() == kTraceExtension; }

// "a FIFO", "a directory", ... for a file that is not a regular one.
const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

Expectation Resolve(const TraceSetOptions& options, const v1::TraceHeader* header) {
  Expectation e;
  if (header != nullptr && header->has_expect_forward()) e.forward = header->expect_forward();
  if (header != nullptr && header->has_expect_backward()) e.backward = header->expect_backward();
  if (options.expect_forward) e.forward = *options.expect_forward;
  if (options.expect_backward) e.backward = *options.expect_backward;
  return e;
}

AuditorOptions MakeAuditorOptions(const TraceSetOptions& options, Expectation expect) {
  AuditorOptions o;
  o.expect = expect;
  o.max_rows = options.max_rows;
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
  auto* violations = r->mutable_violations();
  violations->erase(std::remove_if(violations->begin(), violations->end(),
                                   [](const v1::Violation& v) {
                                     return v.kind() == v1::Violation::FORWARD_COUNT ||
                                            v.kind() == v1::Violation::BACKWARD_COUNT;
                                   }),
                    violations->end());
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
  for (const v1::RankReport& r : ranks) {
    const Expectation e = Resolve(options, r.has_header() ? &r.header() : nullptr);
    if (e.forward > 0 || e.backward > 0) expects_updates = true;
  }
  const size_t traces_read = ranks.size();
  RankAgreement::Findings job = agreement.Judge(&ranks, options.max_violations);
  for (std::string& p : job.problems) result.problems.push_back(std::move(p));
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const v1::RankReport& a, const v1::RankReport& b) {
                     if (a.rank() != b.rank()) return a.rank() < b.rank();
                     if (a.header().pid() != b.header().pid())
                       return a.header().pid() < b.header().pid();
                     return a.path() < b.path();
                   });

  v1::Totals* totals = report.mutable_totals();
  bool damaged = job.incomplete;
  bool violations = job.disagree;
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
    if (IsDamaged(r)) damaged = true;
    if (r.verdict() == v1::FAIL) violations = true;
    *report.add_ranks() = std::move(r);
  }
  for (v1::Violation& v : job.violations) *report.add_violations() = std::move(v);
  for (v1::RankRange& m : job.missing) *report.add_missing_ranks() = std::move(m);

  const std::string traces = Plural(traces_read, "trace", "traces");
  const bool no_update = totals->forward_updates() == 0 && totals->backward_updates() == 0;
  if (damaged) {
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
  } else if (violations) {
    result.outcome = Outcome::kViolations;
  } else {
    result.outcome = Outcome::kPass;
  }
  // Each trace's outcome, with the job's.
  totals->clear_failing_microbatches();
  for (v1::RankReport& r : *report.mutable_ranks()) {
    const Expectation e = Resolve(options, r.has_header() ? &r.header() : nullptr);
    if (result.outcome == Outcome::kNothingAudited && (e.forward > 0 || e.backward > 0)) {
      NotJudged(&r);
    } else if (IsDamaged(r) || !r.damage().empty()) {
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
    report.set_verdict(violations || damaged ? v1::FAIL : v1::PASS);
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
  return result;
}

}  // namespace

bool ExpandTracePaths(const std::vector<std::string>& paths, std::vector<std::string>* files,
                      std::string* error, std::vector<std::string>* skipped) {
  // Each file once: (device, inode) -> the name it was first given as.
  std::map<std::pair<uint64_t, uint64_t>, std::string> seen;
  auto add = [&](const std::string& path, const struct stat& st) {
    const auto [it, fresh] =
        seen.emplace(std::pair<uint64_t, uint64_t>{st.st_dev, st.st_ino}, path);
    if (!fresh) {
      *error = path + ": given twice (the same file as " + it->second + ")";
      return false;
    }
    files->push_back(path);
    return true;
  };
  for (const std::string& arg : paths) {
    struct stat st {};
    if (::stat(arg.c_str(), &st) != 0) {
      *error = arg + ": " +
               (errno == ENOENT ? std::string("no such file or directory")
                                : std::string(std::strerror(errno)));
      return false;
    }
    if (!S_ISDIR(st.st_mode)) {
      // Refused here, before anything opens it: a FIFO would wait for a writer.
      if (!S_ISREG(st.st_mode)) {
        *error = arg + ": not a regular file (" + FileKind(st.st_mode) + ")";
        return false;
      }
      if (!add(arg, st)) return false;
      continue;
    }
    std::vector<std::string> found;
    std::vector<std::string> links;
    std::error_code ec;
    for (fs::directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec)) {
      if (!HasTraceExtension(it->path())) continue;
      std::error_code type_ec;
      if (it->is_symlink(type_ec)) {
        links.push_back(it->path().filename().string());
      } else if (it->is_regular_file(type_ec)) {
        found.push_back(it->path().string());
      }
    }
    if (ec) {
      *error = arg + ": " + ec.message();
      return false;
    }
    std::sort(links.begin(), links.end());
    if (!links.empty() && skipped != nullptr) {
      std::string names;
      for (size_t i = 0; i < links.size() && i < 3; ++i) names += (i > 0 ? ", " : "") + links[i];
      if (links.size() > 3) names += ", ...";
      skipped->push_back(arg + ": skipped " +
                         Plural(links.size(), "symbolic link", "symbolic links") + " (" +
                         Printable(names, 300) +
                         "): links in a directory are not followed; name a trace to read it");
    }
    if (found.empty()) {
      *error = arg + ": no *" + std::string(kTraceExtension) + " files in this directory" +
               (links.empty() ? "" : " (only symbolic links, which are not followed)");
      return false;
    }
    std::sort(found.begin(), found.end());
    for (const std::string& path : found) {
      // lstat: the file found, not what a link put in its place since would point to.
      struct stat one {};
      if (::lstat(path.c_str(), &one) != 0) {
        *error = path + ": " + std::strerror(errno);
        return false;
      }
      if (!S_ISREG(one.st_mode)) {
        *error = path + ": changed while the directory was read (now " +
                 (S_ISLNK(one.st_mode) ? std::string("a symbolic link") : FileKind(one.st_mode)) +
                 ")";
        return false;
      }
      if (!add(path, one)) return false;
    }
  }
  return true;
}

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
                      "empty trace (0 bytes): the process wrote nothing; did it end before the "
                      "agent started?",
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
    if (record.has_footer()) footer_seen = true;
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
  return Conclude(std::move(ranks), agreement, std::move(problems), options);
}

TraceSetResult AuditRankReports(std::vector<v1::RankReport> ranks, const TraceSetOptions& options) {
  RankAgreement agreement;
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (const v1::MicrobatchResult& row : ranks[i].microbatches()) agreement.OnMicrobatch(i, row);
  }
  return Conclude(std::move(ranks), agreement, {}, options);
}
TraceDirSnapshot SnapshotTraceDir(const std::string& dir) {
  TraceDirSnapshot snapshot;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!HasTraceExtension(it->path())) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // no links
    const int64_t mtime_ns =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    snapshot[it->path().string()] = {mtime_ns, static_cast<int64_t>(st.st_size)};
  }
  return snapshot;
}

std::vector<std::string> TracesWrittenSince(const std::string& dir,
                                            const TraceDirSnapshot& before) {
  std::vector<std::string> written;
  for (const auto& [path, stamp] : SnapshotTraceDir(dir)) {
    auto it = before.find(path);
    if (it == before.end() || it->second != stamp) written.push_back(path);
  }
  return written;
}

}  // namespace fp8audit::reports
