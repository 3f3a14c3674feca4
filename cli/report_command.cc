// `fp8audit report PATH... [--format F] [-o FILE]`: renders the audit of existing traces.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/audit_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/help_examples.h"
#include "cli/number_checks.h"
#include "cli/progress_flags.h"
#include "reports/baseline.h"
#include "reports/output.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/trace_paths.h"
#include "reports/trace_set.h"

namespace fp8audit::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string output;
  uint32_t max_rows = 50;
  bool verbose = false;
  bool exit_zero = false;             // 0 instead of 3 (violations) once the report is written
  std::vector<std::string> baseline;  // --baseline PATH...
  ExpectFlags expect;
  SemanticsFlag semantics;
  RunFlag run;
  ProgressFlags progress;
};

// The exit code once the report is written: the verdict's, 0 in place of 3 (violations) with
// --exit-zero. What could not be judged (bad input: a trace unreadable, empty or damaged, nothing
// to audit) keeps its 2.
int ExitCode(const ReportArgs& args, int verdict) {
  return args.exit_zero && verdict == kExitViolation ? kExitOk : verdict;
}

// The report is written: one line naming the file (-o), and the exit code (ExitCode).
int Wrote(const ReportArgs& args, const reports::TraceSetResult& result) {
  const int verdict = ExitCodeFor(result.outcome);
  const int code = ExitCode(args, verdict);
  if (!args.output.empty()) {
    SayLine("report", "wrote " + args.output + " (" + reports::OutcomeWord(result.report) +
                          (code == kExitOk ? ")"
                           : code == kExitViolation
                               ? "; exit " + std::to_string(code) + ", --exit-zero for 0)"
                               : "; exit " + std::to_string(code) + ")"));
  }
  return code;
}

// True, with one line, where -o names one of `files` (the same file, also by another name): the
// report would replace a trace it reads. `baseline`: `files` are --baseline's.
bool OutputIsATraceRead(const std::string& output, const std::vector<std::string>& files,
                        bool baseline) {
  for (const std::string& file : files) {
    if (!reports::SameFile(output, file)) continue;
    SayLine("report", "-o " + output + " is " +
                          (baseline         ? "the baseline trace " + file + " it reads"
                           : file == output ? std::string("a trace it reads")
                                            : "the trace " + file + " it reads") +
                          ": name another file for the report");
    return true;
  }
  return false;
}

// The folder that holds `file` and the folders above it, up to reports::kMaxTraceDirDepth levels,
// by their real paths; none where the folder does not exist.
std::vector<std::string> FoldersAbove(const std::string& file) {
  const size_t slash = file.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : file.substr(0, slash + 1);
  char* real = ::realpath(parent.c_str(), nullptr);
  if (real == nullptr) return {};
  std::string at(real);
  std::free(real);
  std::vector<std::string> out = {at};
  for (int level = 0; level < reports::kMaxTraceDirDepth && at != "/"; ++level) {
    const size_t up = at.rfind('/');
    at = up == 0 || up == std::string::npos ? "/" : at.substr(0, up);
    out.push_back(at);
  }
  return out;
}

// True, with one line, where -o names a trace (*.fp8trace) in a folder of `paths` or in one of
// its subfolders that the report reads (reports::kMaxTraceDirDepth levels): the next report of
// that folder would read the report as a trace.
bool OutputIsATraceInAFolderRead(const std::string& output, const std::vector<std::string>& paths) {
  constexpr std::string_view kSuffix = ".fp8trace";
  if (output.size() <= kSuffix.size() ||
      std::string_view(output).substr(output.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  const std::vector<std::string> above = FoldersAbove(output);
  for (const std::string& path : paths) {
    struct stat dir {};
    if (::stat(path.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode)) continue;
    for (const std::string& folder : above) {
      struct stat st {};
      if (::stat(folder.c_str(), &st) != 0 || st.st_dev != dir.st_dev || st.st_ino != dir.st_ino) {
        continue;
      }
      SayLine("report", "-o " + output + " is a trace in " + path +
                            ", which this report reads: name a file outside it or not named "
                            "*.fp8trace");
      return true;
    }
  }
  return false;
}

// --baseline: this run's audit against the baseline's, per microbatch; 3 where it is worse.
int RunBaseline(const ReportArgs& args, const std::vector<std::string>& files,
                std::vector<std::string> base_files, reports::TraceSetOptions options) {
  std::string error;
  RunFlag latest;  // the baseline's latest run, said where it holds several
  if (!SelectRun("report", latest, &base_files)) return kExitUsage;
  for (const std::string& f : base_files) {
    if (std::find(files.begin(), files.end(), f) != files.end()) {
      SayLine("report", "--baseline: " + f + " is in both the baseline and the traces compared");
      return kExitUsage;
    }
  }
  options.max_rows = 0;  // every microbatch, unfolded beyond the identical ranges
  options.max_violations = 0;
  const reports::TraceSetResult base =
      AuditWithProgress("report", base_files, args.progress, options);
  for (const std::string& p : base.problems) SayLine("report", "baseline: " + p);
  const reports::TraceSetResult now = AuditWithProgress("report", files, args.progress, options);
  PrintProblems("report", now);
  const reports::BaselineComparison c = reports::CompareWithBaseline(base.report, now.report);
  const std::string text = reports::RenderBaselineText(base.report, now.report, c, args.max_rows);
  if (!args.output.empty()) {
    if (!reports::WriteFileAtomically(args.output, text, &error)) {
      SayLine("report", "cannot write " + error);
      return kExitUsage;
    }
    SayLine("report", "wrote " + args.output);
  } else if (!reports::WriteAll(STDOUT_FILENO,
                                ColorFor(STDOUT_FILENO) ? reports::ColorVerdicts(text) : text)) {
    std::cerr << "fp8audit report: cannot write to standard output\n";
    return kExitUsage;
  }
  const auto judged = [](reports::Outcome o) {
    return o == reports::Outcome::kPass || o == reports::Outcome::kViolations;
  };
  if (!judged(base.outcome) || !judged(now.outcome)) return kExitUsage;
  return ExitCode(args, c.worse_overall ? kExitViolation : kExitOk);
}

// Chrome trace and metrics: written while the traces are read; the audit keeps no rows.
int RunStreaming(const ReportArgs& args, reports::Format format,
                 const std::vector<std::string>& files, reports::TraceSetOptions options) {
  std::string error;
  std::unique_ptr<reports::FileOutput> out =
      args.output.empty() ? reports::FileOutput::ForFd(STDOUT_FILENO, "standard output")
                          : reports::FileOutput::Create(args.output, &error);
  if (out == nullptr) {
    SayLine("report", "cannot write " + error);
    return kExitUsage;
  }
  const std::unique_ptr<reports::StreamRenderer> renderer =
      reports::MakeStreamRenderer(format, out.get());
  options.observer = renderer.get();
  options.max_rows = 1;          // rows reach the renderer as they close: none is kept
  options.max_violations = 100;  // the job's disagreements listed in the chrome trace
  renderer->Begin(files);
  const reports::TraceSetResult result = AuditWithProgress("report", files, args.progress, options);
  PrintProblems("report", result);
  renderer->Finish(result);
  if (!out->Finish(&error)) {
    SayLine("report", "cannot write " + error);
    return kExitUsage;
  }
  return Wrote(args, result);
}

int RunReport(const ReportArgs& args) {
  reports::Format format;
  if (!reports::ParseFormat(args.format, &format)) {
    SayLine("report", "unknown --format " + args.format);
    return kExitUsage;
  }
  if (!args.baseline.empty() && format != reports::Format::kText) {
    SayLine("report", "--baseline compares in text only (not --format " + args.format + ")");
    return kExitUsage;
  }
  std::vector<std::string> files;
  std::string error;
  std::vector<std::string> skipped;
  if (!reports::ExpandTracePaths(args.paths, &files, &error, &skipped)) {
    SayLine("report", error);
    return kExitUsage;
  }
  for (const std::string& line : skipped) SayLine("report", line);
  std::vector<std::string> base_files;
  if (!args.baseline.empty()) {
    skipped.clear();
    if (!reports::ExpandTracePaths(args.baseline, &base_files, &error, &skipped)) {
      SayLine("report", "--baseline: " + error);
      return kExitUsage;
    }
    for (const std::string& line : skipped) SayLine("report", "--baseline: " + line);
  }
  if (!args.output.empty()) {
    // Checked before reading: the report must not replace a trace the paths or --baseline name
    // (of any run there), nor be lost after it.
    reports::OutputTarget target;
    if (!reports::ClassifyOutput(args.output, &target, &error)) {
      SayLine("report", "cannot write " + error);
      return kExitUsage;
    }
    if (OutputIsATraceRead(args.output, files, /*baseline=*/false) ||
        OutputIsATraceRead(args.output, base_files, /*baseline=*/true) ||
        OutputIsATraceInAFolderRead(args.output, args.paths) ||
        OutputIsATraceInAFolderRead(args.output, args.baseline)) {
      return kExitUsage;
    }
  }
  if (!SelectRun("report", args.run, &files)) return kExitUsage;
  reports::TraceSetOptions options;
  args.expect.Apply(&options);
  args.semantics.Apply(&options);
  if (!args.baseline.empty()) return RunBaseline(args, files, std::move(base_files), options);
  if (reports::IsStreamingFormat(format)) return RunStreaming(args, format, files, options);
  const bool complete = format == reports::Format::kJson || format == reports::Format::kHtml;
  reports::RenderOptions render;
  render.max_rows = args.max_rows;
  render.verbose = args.verbose;
  // Text and markdown show at most max_rows rows and violations, JUnit its failing microbatches
  // (fewer past 10 traces): keep no more than that.
  const uint32_t kept =
      format == reports::Format::kJunit ? render.junit_max_failures : args.max_rows;
  options.max_rows = complete ? 0 : kept;
  options.max_violations = complete ? 0 : kept;
  const reports::TraceSetResult result = AuditWithProgress("report", files, args.progress, options);
  PrintProblems("report", result);

  std::string out;
  if (!reports::Render(result.report, format, render, &out, &error)) {
    std::cerr << "fp8audit report: " << error << "\n";
    return kExitInternal;
  }
  if (!args.output.empty()) {
    if (!reports::WriteFileAtomically(args.output, out, &error)) {
      SayLine("report", "cannot write " + error);
      return kExitUsage;
    }
  } else if (!reports::WriteAll(STDOUT_FILENO,
                                format == reports::Format::kText && ColorFor(STDOUT_FILENO)
                                    ? reports::ColorVerdicts(out)
                                    : out)) {
    std::cerr << "fp8audit report: cannot write to standard output\n";
    return kExitUsage;
  }
  return Wrote(args, result);
}

}  // namespace

void AddReportCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* sub = app.add_subcommand(
      "report", "Audit .fp8trace files and render a per-rank, per-microbatch report");
  sub->add_option("PATH", args->paths,
                  "trace files, or directories whose *.fp8trace files are all read")
      ->required()
      ->type_name("");
  sub->add_option("--format", args->format,
                  "text (default), markdown, json (the proto3 JSON mapping of fp8audit.v1."
                  "AuditReport: fields that are 0 or empty are left out; past a trace's first "
                  "10,000 microbatches, identical consecutive ones are one row to its "
                  "through_index), junit (for CI "
                  "servers: one testcase per trace, named by its rank, its failing microbatches "
                  "listed), html (one self-contained page: per-rank timelines and charts, "
                  "violations in detail), chrome-trace (Chrome Trace Event JSON for Perfetto UI "
                  "and chrome://tracing: a process per rank, the microbatches and their passes, "
                  "a track per thread with every FP8 state update and why an extra one "
                  "happened; written while reading, any size) or metrics (one JSON line per "
                  "microbatch: rank, step, microbatch, forward, backward, expected_forward, "
                  "expected_backward, verdict, and by_source and probe_notes where the agent "
                  "names its probes; for wandb.log or TensorBoard)")
      ->type_name("FORMAT")
      ->check(CLI::IsMember(
          {"text", "markdown", "md", "json", "junit", "html", "chrome-trace", "metrics"}));
  sub->add_option("-o,--output", args->output,
                  "write the report to FILE (atomically: a temporary file, then rename) instead "
                  "of standard output; never a trace it reads, nor a *.fp8trace in a folder it "
                  "reads")
      ->type_name("FILE");
  sub->add_flag("--exit-zero", args->exit_zero,
                "exit 0 instead of 3 (violations) once the report is written (a CI step that "
                "publishes the report; the gate is `fp8audit check` or a step without it); "
                "what exits 2 without it still does: bad input (a trace unreadable, empty, "
                "damaged or incomplete; nothing to judge) and an unwritable output");
  sub->add_flag("-v,--verbose", args->verbose,
                "text: every violation of each microbatch with its events, instead of identical "
                "problems collapsed into one line per cause");
  sub->add_option("--max-rows", args->max_rows,
                  "text and markdown: at most N microbatch rows and violations per rank; a longer "
                  "trace shows its failing microbatches and a summary (0: all; default 50). JSON "
                  "is always complete; JUnit lists up to 100 failing microbatches per trace")
      ->type_name("N")
      ->transform(Decimal());
  sub->add_option("--baseline", args->baseline,
                  "compare with the traces of an earlier run (before the fix, main's): per rank "
                  "and microbatch, whether the updates came nearer to the expected ones or went "
                  "further; exits 3 where a microbatch is worse or more fail, 0 otherwise, 2 "
                  "where either audit is incomplete (its latest run where PATH holds several; "
                  "text only)")
      ->type_name("PATH")
      ->expected(1);
  args->semantics.Add(sub);
  args->expect.Add(sub, "default: what the trace's header records, else 1");
  args->run.Add(sub);
  args->progress.Add(sub);
  sub->footer(WithExamples(
      std::string("Reads each trace once, record by record (chrome-trace first reads the "
                  "first records of each\nto place the traces on one time line). A damaged "
                  "trace is reported up to its last whole record,\nand one line on stderr "
                  "names the file, the "
                  "record number and the byte offset of the damage. In a\ndirectory, "
                  "symbolic links named *.fp8trace are skipped (one line says so); name "
                  "one to read it.\n\nExit codes:\n  (the audit's verdict, also with -o; "
                  "--exit-zero: 0 instead of 3 once the report is written)\n") +
          kAuditExitCodes,
      {"fp8audit report fp8audit-traces             # the traces `fp8audit run` wrote, per rank",
       "fp8audit report after/ --baseline before/     # better or worse than the run before"}));
  sub->callback([args, exit_code] { *exit_code = RunReport(*args); });
}

}  // namespace fp8audit::cli
