// `fp8audit check PATH...`: gates existing traces; prints a short verdict and exits 0, 2 or 3.
#include <iostream>
#include <memory>

#include "cli/audit_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/help_examples.h"
#include "cli/progress_flags.h"
#include "reports/render.h"
#include "reports/trace_set.h"

namespace fp8audit::cli {
namespace {

constexpr uint32_t kSummaryViolations = 10;

struct CheckArgs {
  std::vector<std::string> paths;
  ExpectFlags expect;
  RunFlag run;
  ProgressFlags progress;
};

int RunCheck(const CheckArgs& args) {
  std::vector<std::string> files;
  std::string error;
  std::vector<std::string> skipped;
  if (!reports::ExpandTracePaths(args.paths, &files, &error, &skipped)) {
    SayLine("check", error);
    return kExitUsage;
  }
  for (const std::string& line : skipped) SayLine("check", line);
  if (!SelectRun("check", args.run, &files)) return kExitUsage;
  reports::TraceSetOptions options;
  args.expect.Apply(&options);
  // Only the verdict and the first violations are printed: keep nothing else.
  options.max_rows = 1;
  options.max_detailed = 0;
  options.max_violations = kSummaryViolations;
  const reports::TraceSetResult result = AuditWithProgress("check", files, args.progress, options);
  PrintProblems("check", result);
  const std::string summary = reports::RenderSummary(result.report, kSummaryViolations);
  std::cout << (ColorFor(STDOUT_FILENO) ? reports::ColorVerdicts(summary) : summary);
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "fp8audit check: cannot write to standard output\n";
    return kExitUsage;
  }
  return ExitCodeFor(result.outcome);
}

}  // namespace

void AddCheckCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CheckArgs>();
  auto* sub = app.add_subcommand(
      "check", "Gate existing .fp8trace files: a short verdict, and the exit code says it");
  sub->add_option("PATH", args->paths,
                  "trace files, or directories whose *.fp8trace files are all read")
      ->required()
      ->type_name("");
  args->expect.Add(sub, "default: what the trace's header records, else 1");
  args->run.Add(sub);
  args->progress.Add(sub);
  sub->footer(WithExamples(
      std::string("`fp8audit report` shows the same audit in full.\n\nExit codes:\n") +
          kAuditExitCodes,
      {"fp8audit check fp8audit-traces        # in CI, after the job: 0 pass, 2, 3 (above)",
       "fp8audit check traces --expect-backward 2   # a job whose backward updates twice"}));
  sub->callback([args, exit_code] { *exit_code = RunCheck(*args); });
}

}  // namespace fp8audit::cli
