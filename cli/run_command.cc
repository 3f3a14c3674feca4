// `fp8audit run [flags] -- CMD ARGS...`: runs CMD with the agent injected, then audits the traces
// it wrote.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/audit_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/heartbeat.h"
#include "cli/help_examples.h"
#include "cli/launcher.h"
#include "cli/number_checks.h"
#include "cli/out_dir.h"
#include "cli/progress_flags.h"
#include "cli/python_hook.h"
#include "cli/run_reports.h"
#include "fp8audit/patterns.h"
#include "fp8audit/vocabulary.h"
#include "reports/output.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/trace_set.h"

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;

struct RunArgs {
  std::string out = "fp8audit-traces";
  ExpectFlags expect;
  SemanticsFlag semantics;
  bool fail_fast = false;
  bool self_profile = false;
  bool fix_te = false;
  bool no_python_hook = false;
  std::string probe = "auto";
  std::string on_full = "wait";
  std::string patterns;
  uint32_t max_rows = 50;
  double heartbeat = kDefaultHeartbeatSeconds;
  int quiet = 0;  // -q: the summary; -qq: nothing after the command but problem lines
  bool verbose = false;
  bool pass_exit_code = false;  // the command's own code when it failed, instead of 4
  ReportFiles files;
  ProgressFlags progress;
};

void Say(const std::string& line) { SayLine("run", line); }

// --quiet: the violations named before the verdict line.
constexpr uint32_t kQuietViolations = 5;

// An id for this run, unique among runs that share an --out directory: the agent writes it into
// each trace's header (FP8AUDIT_RUN_ID), and the audit reads only the traces that carry it.
std::string NewRunId() {
  std::random_device random;
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::string id;
  for (const char* p = host; *p != '\0' && id.size() < 24; ++p) {
    const char c = *p;
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    id += plain ? c : '_';
  }
  char tail[48];
  std::snprintf(tail, sizeof tail, "-%d-%08x%08x", static_cast<int>(::getpid()), random(),
                random());
  return id + tail;
}

// "3 processes (pids 12, 13, 14)".
std::string Processes(const std::vector<int>& pids) {
  std::string list;
  for (size_t i = 0; i < pids.size() && i < 8; ++i) {
    list += (i > 0 ? ", " : "") + std::to_string(pids[i]);
  }
  if (pids.size() > 8) list += ", ...";
  return std::to_string(pids.size()) + (pids.size() == 1 ? " process (pid " : " processes (pids ") +
         list + ")";
}

int RunRun(const RunArgs& args, const std::vector<std::string>& command) {
  if (command.empty()) {
    Say("no command given: fp8audit run [flags] [--] CMD [ARGS...]");
    return kExitUsage;
  }
  // Flags that cannot go together are bad flags: said before anything is looked up or made.
  if (args.fix_te && args.no_python_hook) {
    Say("--fix-te works through the Python hook: drop --no-python-hook");
    return kExitUsage;
  }
  std::string error;
  const std::string agent = FindAgentLibrary(&error);
  if (agent.empty()) {
    Say(error);
    return kExitUsage;
  }
  std::error_code ec;
  std::string patterns;
  if (!args.patterns.empty()) {
    // Non-blocking: a FIFO is refused below (LoadPatternFile) instead of waiting for a writer.
    const int fd = ::open(args.patterns.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      Say("--patterns " + args.patterns + ": " + std::strerror(errno));
      return kExitUsage;
    }
    ::close(fd);
    patterns = fs::absolute(args.patterns, ec).string();
    // The agent's own parser: a mistake is reported now, not after the job has run.
    std::vector<agent::PatternRule> rules;
    if (!agent::LoadPatternFile(patterns, &rules, &error)) {
      Say("--patterns " + error);
      return kExitUsage;
    }
  }
  RunPaths run_paths;
  run_paths.out = args.out;
  if (!args.patterns.empty()) run_paths.inputs.emplace_back("--patterns", args.patterns);
  if (!CheckReportFiles(args.files, run_paths, &error)) {
    Say(error);
    return kExitUsage;
  }
  // Checked by --probe's validator: one of kProbeModeNames, or an earlier spelling.
  const ProbeMode probe = ParseProbeMode(args.probe).value_or(ProbeMode::kAuto);
  std::vector<std::pair<std::string, std::string>> hook;
  std::string hook_error;
  if (!args.no_python_hook) {
    // te-count before te-fix: the fix then wraps the counting function and keeps it when removed.
    std::vector<std::string> features = {"te-version", "te-recompute"};
    if (ProbeModeUses(probe, ::fp8audit::Probe::kPythonHook)) features.emplace_back("te-count");
    if (args.fix_te) features.emplace_back("te-fix");
    hook = PythonHookEnvironment(features, /*need_model=*/args.fix_te, &hook_error);
    if (hook.empty() && args.fix_te) {  // --fix-te cannot work: a bad flag, before CMD is sought
      Say("--fix-te: " + hook_error);
      return kExitUsage;
    }
  }
  if (const auto after = Fp8auditFlagsAfterCommand(command); !after.empty()) {
    std::string list;
    for (const std::string& flag : after) list += (list.empty() ? "" : " ") + flag;
    Say(list + " after CMD went to " + command.front() +
        ", not to fp8audit: fp8audit's flags go before CMD (fp8audit run [flags] -- CMD ...)");
  }
  // A command that cannot run leaves nothing behind: checked before --out is made.
  if (const int code = CheckCommand(command.front(), &error); code != 0) {
    Say(error);
    return code;
  }
  const fs::path out = fs::absolute(args.out, ec);
  const bool existed = fs::exists(out, ec);
  fs::create_directories(out, ec);
  if (!ec && !existed) {  // as the agent makes it: writable by this user alone (umask applies)
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::chmod(out.c_str(), 0755 & ~mask);
  }
  if (ec || !fs::is_directory(out)) {
    Say("--out " + args.out + ": " + (ec ? ec.message() : std::string("not a directory")));
    return kExitUsage;
  }
  if (const std::string unsafe = UnsafeOutDir(out.string()); !unsafe.empty()) {
    Say("--out " + out.string() + " " + unsafe + ": give --out a folder of your own");
    return kExitUsage;
  }

  const std::string run_id = NewRunId();
  std::vector<std::pair<std::string, std::string>> env = {
      {"LD_PRELOAD", AppendPreload(std::getenv("LD_PRELOAD"), agent)},
      {"CUDA_INJECTION64_PATH", agent},
      {"NVTX_INJECTION64_PATH", agent},
      {"FP8AUDIT_OUT", out.string()},
      {"FP8AUDIT_RUN_ID", run_id},
  };
  // Only an expectation given is handed on: the trace then records it as given, and the recipes
  // the job runs (RECIPE facts) do not change it; unset, the agent's default is 1/1.
  if (args.expect.forward_option->count() > 0) {
    env.emplace_back("FP8AUDIT_EXPECT_FORWARD", std::to_string(args.expect.forward));
  }
  if (args.expect.backward_option->count() > 0) {
    env.emplace_back("FP8AUDIT_EXPECT_BACKWARD", std::to_string(args.expect.backward));
  }
  for (const char* name : {"CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"}) {
    const char* previous = std::getenv(name);
    if (previous != nullptr && *previous != '\0' && agent != previous) {
      Say(std::string("replacing ") + name + "=" + previous + " with the agent");
    }
  }
  if (args.fail_fast) env.emplace_back("FP8AUDIT_FAIL_FAST", "1");
  if (args.self_profile) env.emplace_back("FP8AUDIT_SELF_PROFILE", "1");
  env.emplace_back("FP8AUDIT_ON_FULL", args.on_full);
  if (!patterns.empty()) env.emplace_back("FP8AUDIT_PATTERNS", patterns);
  env.emplace_back("FP8AUDIT_PROBE", std::string(ProbeModeName(probe)));
  if (!args.no_python_hook && hook.empty()) {
    Say("the Python hook is not armed (" + hook_error +
        "): Python jobs are counted by the C-level probes only");
  }
  env.insert(env.end(), hook.begin(), hook.end());

  const reports::TraceDirSnapshot before = reports::SnapshotTraceDir(out.string());
  LaunchOptions launch;
  launch.wait_for_library = agent;
  launch.on_waiting = [](const std::vector<int>& pids) {
    Say("the command ended; waiting for " + Processes(pids) +
        " it started that still run with the agent and may still write traces (signals to "
        "fp8audit are passed on to them)");
  };
  std::unique_ptr<Heartbeat> heartbeat;
  if (HeartbeatWanted(args.heartbeat, args.quiet, ::isatty(STDERR_FILENO) == 1)) {
    heartbeat = std::make_unique<Heartbeat>(
        [] {
          return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
        },
        [&] { return RecordedSince(out.string(), before, run_id); },
        [](const std::string& line) {
          // One write: the line stays whole among the lines the command writes to the terminal.
          const std::string text = "fp8audit run: " + line + "\n";
          ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
          (void)ignored;
        });
    launch.heartbeat_ms = std::max<uint64_t>(1, static_cast<uint64_t>(args.heartbeat * 1000));
    launch.on_heartbeat = [&heartbeat] { heartbeat->Beat(); };
  }
  const LaunchResult launched = LaunchAndWait(command, env, launch);
  if (launched.status == LaunchResult::Status::kExecFailed ||
      launched.status == LaunchResult::Status::kForkFailed) {
    Say(launched.error);
    return launched.ShellCode();
  }
  const int command_code = launched.ShellCode();
  std::string ended = "the command exited with " + std::to_string(command_code);
  if (launched.status == LaunchResult::Status::kSignaled) {
    ended = "the command was killed by signal " + std::to_string(launched.code) + " (" +
            strsignal(launched.code) + ")";
  }
  // What run returns for a failed command: 4 (never an audit's code), or the command's own.
  const int failed_code = args.pass_exit_code ? command_code : kExitCommandFailed;
  const std::string failed_line =
      ended + (args.pass_exit_code ? ": returning its exit code (--pass-exit-code)"
                                   : ": fp8audit run exits " + std::to_string(kExitCommandFailed) +
                                         " (--pass-exit-code returns the command's code)");

  std::vector<std::string> others, foreign;
  std::vector<std::string> traces = reports::TracesOfRun(
      OwnTraces(reports::TracesWrittenSince(out.string(), before), &foreign), run_id, &others);
  if (!foreign.empty()) {
    Say("left out " + std::to_string(foreign.size()) +
        (foreign.size() == 1 ? " trace" : " traces") + " in " + out.string() +
        " that another user owns (e.g. " + foreign.front() + "): not this run's, not audited");
  }
  if (!others.empty()) {
    Say("left out " + std::to_string(others.size()) +
        (others.size() == 1 ? " trace another run wrote to " : " traces other runs wrote to ") +
        out.string() + " meanwhile (e.g. " + others.front() + "): this run audits its own");
  }
  std::vector<std::string> copies;
  reports::DropCopies(&traces, &copies);
  for (const std::string& line : copies) Say(line);
  if (traces.empty()) {
    if (command_code != 0) Say(failed_line);
    const char* off = std::getenv("FP8AUDIT_DISABLE");  // the agent's words (agent/src/shim.cc)
    const std::string_view o = off != nullptr ? off : "";
    if (o == "1" || o == "true" || o == "yes" || o == "on") {
      Say("no trace was written to " + out.string() + ": FP8AUDIT_DISABLE=" + off +
          " is set, which turns the agent off; unset it to audit");
      return command_code != 0 ? failed_code : kExitUsage;
    }
    Say("no trace was written to " + out.string() +
        ": the command made no CUDA launch or NVTX call that the agent saw, or the agent was "
        "not loaded (LD_PRELOAD=" +
        agent +
        "; a static or setuid program, or one that clears its environment, runs without it)");
    return command_code != 0 ? failed_code : kExitUsage;
  }
  reports::TraceSetOptions options;
  args.expect.Apply(&options);
  args.semantics.Apply(&options);
  // Report files hold every row: the audit keeps them all then (the printed report still shows
  // --max-rows).
  options.max_rows = args.files.empty() ? args.max_rows : 0;
  options.max_violations = options.max_rows;
  reports::TraceSetResult result = AuditWithProgress("run", traces, args.progress, options);
  v1::CommandEnd* end = result.report.mutable_command_end();
  end->set_exit_code(command_code);
  if (launched.status == LaunchResult::Status::kSignaled) end->set_signal(launched.code);
  reports::RenderOptions render;
  render.max_rows = args.max_rows;
  render.verbose = args.verbose;
  if (args.quiet < 2) {
    const std::string text = args.quiet == 1
                                 ? reports::RenderSummary(result.report, kQuietViolations)
                                 : reports::RenderText(result.report, render);
    std::cerr << "\n" << (ColorFor(STDERR_FILENO) ? reports::ColorVerdicts(text) : text);
  }
  PrintProblems("run", result);
  std::vector<std::string> unwritten;
  const bool written = WriteReportFiles(result.report, args.files, &unwritten);
  for (const std::string& line : unwritten) Say(line);
  if (args.fix_te) {
    bool te_seen = false;
    int unhooked = 0;  // processes that used TE where the hook (and so the fix) never ran
    for (const auto& rank : result.report.ranks()) {
      te_seen = te_seen || !rank.recording().te_version().empty() || rank.recording().te_patched();
      if (rank.python_hook_absent()) ++unhooked;
    }
    if (unhooked > 0) {
      Say("--fix-te: " + std::to_string(unhooked) +
          (unhooked == 1 ? " process used" : " processes used") +
          " Transformer Engine without fp8audit's Python hook, so without the fix (python -I or "
          "-E, or a PYTHONPATH of its own): it ran unpatched");
    } else if (!te_seen) {
      Say("--fix-te: no process of the command imported Transformer Engine (no trace records its "
          "version): nothing was patched");
    }
  }
  if (args.quiet < 2) {
    Say("full report: fp8audit report " + reports::ShellQuote(out.string()) + " --run " +
        reports::ShellQuote(run_id) + " (this run; the latest run there without --run)");
  }
  // --fail-fast: the agent ended the command with 3 at a failing microbatch: the audit's 3.
  const bool failed_fast = args.fail_fast && command_code == kExitViolation &&
                           result.outcome == reports::Outcome::kViolations;
  if (command_code != 0 && !failed_fast) {
    Say(failed_line);
    return failed_code;
  }
  if (!written) return kExitUsage;
  return ExitCodeFor(result.outcome);
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand(
      "run", "Run a command with the agent injected, then audit the traces it wrote");
  sub->add_option("--out", args->out,
                  "directory for the traces (created; default fp8audit-traces). The audit reads "
                  "the *.fp8trace files this run's processes wrote there (their headers name "
                  "this run's FP8AUDIT_RUN_ID)")
      ->type_name("DIR");
  args->semantics.Add(sub);
  args->expect.Add(sub, "default 1");
  sub->add_flag("--fail-fast", args->fail_fast,
                "the agent ends CMD at the first failing microbatch, with exit code 3 "
                "(FP8AUDIT_FAIL_FAST=1)");
  sub->add_flag("--pass-exit-code", args->pass_exit_code,
                "when CMD fails, exit with CMD's own code (128+S for signal S) instead of 4, "
                "as a plain wrapper would; then a failed CMD's 2 or 3 reads like an audit's");
  sub->add_flag("--self-profile", args->self_profile,
                "the agent prints, at CMD's exit, how often its handlers ran and the host time "
                "spent in them (FP8AUDIT_SELF_PROFILE=1)");
  sub->add_flag("--fix-te", args->fix_te,
                "apply the fixed FP8 update ownership to Transformer Engine in CMD and every "
                "Python process it starts (fp8audit.te.patch() when TE is imported; verified TE "
                "releases only, otherwise one line on stderr and TE runs unpatched; one line "
                "after the run when no process imported TE)");
  sub->add_option("--probe", args->probe,
                  "what counts FP8 state updates (FP8AUDIT_PROBE), one of " +
                      std::string(kProbeModeNames) +
                      ": auto (default) counts Transformer Engine's update calls where "
                      "libtransformer_engine is loaded and leaves CUPTI free for torch.profiler "
                      "and Nsight, and uses CUPTI kernel-launch callbacks in a job without TE or "
                      "with --patterns; te-call never uses CUPTI; kernel only launches; all every "
                      "probe (for cross-checks); the earlier te and cupti are read too")
      ->check([](const std::string& value) {
        return ParseProbeMode(value) ? std::string() : "not one of " + std::string(kProbeModeNames);
      })
      ->type_name("MODE");
  sub->add_flag("--no-python-hook", args->no_python_hook,
                "do not put fp8audit's Python hook on CMD's PYTHONPATH. By default it records "
                "TE's version and each TE module's recipe (without it no recipe is recorded and "
                "the expectation stays 1/1, also for a job without DelayedScaling), counts "
                "reduce_and_update_fp8_tensors calls (TE's unfused update path included), checks "
                "that each module recomputed in backward runs with its forward's FP8 state, "
                "recipe, fp8_output and fp8_grad, and records weight caches a recompute "
                "re-quantized and DelayedScaling scales TE's update cannot reach (frozen)");
  sub->add_option("--on-full", args->on_full,
                  "what a thread of CMD does when its agent event buffer is full: wait (default) "
                  "for the agent's writer, giving up after 2 s without writer progress, or drop "
                  "the event; drops are counted in the trace and the audit is then incomplete "
                  "(FP8AUDIT_ON_FULL)")
      ->check(CLI::IsMember({"wait", "drop"}))
      ->type_name("MODE");
  sub->add_option("--patterns", args->patterns,
                  "kernel-name patterns for the agent's classifier (FP8AUDIT_PATTERNS; checked "
                  "before CMD starts)")
      ->type_name("FILE");
  sub->add_option("--max-rows", args->max_rows,
                  "at most N microbatch rows and violations per rank in the printed report (0: "
                  "all; default 50)")
      ->type_name("N")
      ->transform(Decimal());
  sub->add_flag("--quiet,-q", args->quiet,
                "print a summary instead of the report: the failing traces, their first "
                "violations, the verdict line and the next step (`fp8audit report DIR` shows "
                "all); twice (-qq): nothing after the command but problems (exit status only)");
  sub->add_flag("-v,--verbose", args->verbose,
                "every violation of each microbatch with its events, instead of identical "
                "problems collapsed into one line per cause");
  sub->add_option("--heartbeat", args->heartbeat,
                  "while CMD runs and standard error is a terminal, one line every SECONDS "
                  "(default 60; 0: never; never with --quiet) with the time elapsed and this "
                  "run's traces so far and their size")
      ->check(FiniteNumber())
      ->check(CLI::NonNegativeNumber.description(""))
      ->type_name("SECONDS");
  sub->add_option("--junit", args->files.junit,
                  "also write the report as JUnit XML to FILE (for CI: one testcase per trace)")
      ->type_name("FILE");
  sub->add_option("--html", args->files.html, "also write the report as one HTML page to FILE")
      ->type_name("FILE");
  sub->add_option("--json", args->files.json,
                  "also write the report as JSON (fp8audit.v1.AuditReport) to FILE")
      ->type_name("FILE");
  sub->add_option("--markdown", args->files.markdown, "also write the report as markdown to FILE")
      ->type_name("FILE");
  args->progress.Add(sub);
  // Everything from the command's name on is the command: its own flags are not parsed here.
  auto command = std::make_shared<std::vector<std::string>>();
  sub->add_option("CMD", *command, "the command to run, and its arguments")->type_name("");
  sub->positionals_at_end();
  sub->footer(WithExamples(
      "Everything from CMD on is CMD's own, flags included (a -- before CMD is optional).\n"
      "CMD runs with LD_PRELOAD (the agent after the job's own), CUDA_INJECTION64_PATH and "
      "NVTX_INJECTION64_PATH set\n"
      "to the agent: $FP8AUDIT_AGENT, else ../lib/libfp8audit.so next to this executable, and\n"
      "fp8audit's Python hook first on PYTHONPATH (chaining CMD's own sitecustomize).\n"
      "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGPIPE sent to fp8audit are\n"
      "passed on to CMD. When CMD ends, fp8audit waits for the processes it started that still\n"
      "run with the agent (it is their subreaper; one line names them), then audits the traces\n"
      "this run's processes wrote (FP8AUDIT_RUN_ID in their headers: another run's traces in\n"
      "the same --out are left out, with one line). The report goes to standard error (CMD's\n"
      "standard output stays its own); `fp8audit report DIR` shows it again, for every run\n"
      "that wrote there.\n\n"
      "Exit codes:\n"
      "  (the audit's verdict and CMD's failure never share a code)\n"
      "  4    CMD failed (a non-zero exit or a signal; one line says which), whatever the audit\n"
      "       found; the report is still printed. --pass-exit-code: CMD's own code instead\n"
      "       (128+S when killed by signal S), as a wrapper returns it\n"
      "  126  CMD could not be executed;  127  CMD was not found (nothing is created)\n"
      "  0    CMD succeeded and every microbatch had the expected updates\n"
      "  1    internal error\n"
      "  2    bad flags, agent library not found, --patterns unreadable, --out or a report FILE\n"
      "       unusable (checked before CMD runs; a report file that cannot be written after it:\n"
      "       the printed report stands), --fix-te\n"
      "       without fp8audit's Python package or model library (or with --no-python-hook); no\n"
      "       trace was written, or a trace is damaged, ends without a footer (a process was\n"
      "       killed), lost events or shows no backward pass: the audit is incomplete; there is\n"
      "       nothing to judge (no microbatch, or not one FP8 state update)\n"
      "  3    CMD succeeded and the audit found violations (also where another trace is\n"
      "       incomplete)\n",
      {"fp8audit run -- torchrun --nproc-per-node 8 train.py   # the report on stderr at the end",
       "fp8audit run --fix-te --quiet --junit fp8audit.xml -- python train.py  # fixed, for CI"}));
  sub->callback([args, command, exit_code] { *exit_code = RunRun(*args, *command); });
}

}  // namespace fp8audit::cli
