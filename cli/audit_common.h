// What `fp8audit run`, `report` and `check` share: expectation flags, exit-code mapping, problem
// lines. Parsing helpers only; the analysis is in reports/.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/number_checks.h"
#include "reports/event_text.h"
#include "reports/trace_runs.h"
#include "reports/trace_set.h"
#include "state/semantics.h"

namespace fp8audit::cli {

// --expect-forward N / --expect-backward N, unset unless given.
struct ExpectFlags {
  uint32_t forward = 1;
  uint32_t backward = 1;
  CLI::Option* forward_option = nullptr;
  CLI::Option* backward_option = nullptr;

  void Add(CLI::App* sub, const std::string& when_unset) {
    forward_option =
        sub->add_option("--expect-forward", forward,
                        "forward FP8 state updates expected per microbatch (" + when_unset + ")")
            ->type_name("N")
            ->transform(Decimal())
            ->check(CLI::Range(0u, 1000000u).description(""));
    backward_option =
        sub->add_option("--expect-backward", backward,
                        "backward FP8 state updates expected per microbatch (" + when_unset + ")")
            ->type_name("N")
            ->transform(Decimal())
            ->check(CLI::Range(0u, 1000000u).description(""));
  }
  void Apply(reports::TraceSetOptions* options) const {
    if (forward_option->count() > 0) options->expect_forward = forward;
    if (backward_option->count() > 0) options->expect_backward = backward;
  }
};

// --semantics NAME: the ownership model's semantics the explanations of extra updates use, unset
// unless given (the audit then chooses from each trace: the patch's, else TE's version's).
struct SemanticsFlag {
  std::string name;

  void Add(CLI::App* sub) {
    sub->add_option("--semantics", name,
                    "ownership model semantics for the explanations of extra updates: " +
                        std::string(state::kSemanticsNames) +
                        " (default: chosen per trace: fixed when fp8audit.te patched TE, else "
                        "the one modelling the TE version the trace records, te-2.20 for "
                        "2.20.x; none otherwise)")
        ->type_name("SEMANTICS")
        ->check(
            [](const std::string& value) -> std::string {
              return state::ParseSemantics(value)
                         ? std::string()
                         : "unknown semantics '" + value +
                               "' (known: " + std::string(state::kSemanticsNames) + ")";
            },
            "");
  }
  void Apply(reports::TraceSetOptions* options) const {
    if (const auto s = state::ParseSemantics(name)) {
      options->semantics = std::string(state::SemanticsName(*s));
    }
  }
};

// --run RUN: which run's traces `report` and `check` read where their paths hold traces of several
// `fp8audit run`s (reports/trace_runs.h): the latest unless told otherwise.
struct RunFlag {
  std::string select = "latest";

  void Add(CLI::App* sub) {
    sub->add_option("--run", select,
                    "where the paths hold traces of several runs (two `fp8audit run`s into one "
                    "folder): latest (the default: the run started last, said in one line), "
                    "all (every trace, as one job), or a run's id or the start of one (`fp8audit "
                    "run` prints it; the line about several runs lists them)")
        ->type_name("RUN");
  }
};

inline int ExitCodeFor(reports::Outcome outcome) {
  switch (outcome) {
    case reports::Outcome::kPass:
      return kExitOk;
    case reports::Outcome::kViolations:
      return kExitViolation;
    case reports::Outcome::kIncomplete:
    case reports::Outcome::kNothingAudited:
      return kExitUsage;
  }
  return kExitInternal;
}

// Whether text written to `fd` gets colour: a terminal, NO_COLOR unset or empty
// (https://no-color.org), TERM not "dumb"; FORCE_COLOR set and not "0" forces it (CI logs that
// render ANSI).
inline bool ColorFor(int fd) {
  if (const char* force = std::getenv("FORCE_COLOR"); force != nullptr && *force != '\0') {
    return std::string_view(force) != "0";
  }
  if (const char* no = std::getenv("NO_COLOR"); no != nullptr && *no != '\0') return false;
  if (const char* term = std::getenv("TERM"); term != nullptr && std::string_view(term) == "dumb") {
    return false;
  }
  return ::isatty(fd) == 1;
}

// One line on stderr, "fp8audit COMMAND: LINE", its control characters (file names, trace strings)
// neutralised as in the reports.
inline void SayLine(const std::string& command, const std::string& line) {
  std::cerr << "fp8audit " << command << ": " << reports::Printable(line, 1 << 16) << "\n";
}

// One line per trace that could not be read in full, per rank missing or claimed twice, and the
// reason nothing was audited.
inline void PrintProblems(const std::string& command, const reports::TraceSetResult& result) {
  for (const std::string& p : result.problems) SayLine(command, p);
}

// `files` narrowed to the run `flag` chooses, with its line where they held several runs; false
// (said in one line) where it names no run.
inline bool SelectRun(const std::string& command, const RunFlag& flag,
                      std::vector<std::string>* files) {
  std::vector<std::string> chosen, notes;
  std::string error;
  if (!reports::SelectRun(*files, flag.select, &chosen, &notes, &error)) {
    SayLine(command, "--run: " + error);
    return false;
  }
  for (const std::string& line : notes) SayLine(command, line);
  *files = std::move(chosen);
  return true;
}

inline constexpr const char* kAuditExitCodes =
    "  0  no violation: every microbatch had the expected updates, and each module recompute\n"
    "     checked ran in its forward's FP8 state, recipe and call flags\n"
    "  1  internal error\n"
    "  2  bad flags or path (not a regular file or directory, or a file given twice); the output\n"
    "     cannot be written (standard output on a full disk; report's -o a directory or a trace\n"
    "     being read); a trace is unreadable, empty, damaged, of a newer schema, ends without a\n"
    "     footer (its process was killed), lost events or shows no backward pass though backward\n"
    "     updates were expected: the audit is incomplete; a rank is missing (ranks 0 to the\n"
    "     highest) or claimed twice; nothing to judge: no trace holds a microbatch,\n"
    "     DelayedScaling updates were expected and not one came, or a recipe without them\n"
    "     (current or block scaling, MXFP8, NVFP4) recomputed no module; --run names no run of\n"
    "     the traces\n"
    "  3  the audit found violations, also where another trace is incomplete\n";

}  // namespace fp8audit::cli
