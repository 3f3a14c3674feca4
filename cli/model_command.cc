// `fp8audit model`: predicts FP8 state updates per microbatch for a scenario or a generated
// checkpointing layout, under one ownership semantics (fixed, or a Transformer Engine release's).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/help_examples.h"
#include "cli/number_checks.h"
#include "reports/event_text.h"
#include "reports/output.h"
#include "state/predict.h"
#include "state/semantics.h"

namespace fp8audit::cli {

namespace {

struct ModelFlags {
  std::vector<std::string> scenarios;
  bool compare = false;
  std::string semantics = "fixed";
  uint32_t microbatches = 0;
  std::string format = "text";
  uint32_t layers = 0;
  uint32_t linears_per_layer = 1;
  std::string checkpoint{state::kNoCheckpointName};
  std::string segments = "per-layer";
  bool eval = false;
  std::string backward = "after";
  bool check = false;
  std::string trace_out;
  uint32_t max_explanations = 20;
};

state::ModelRequest ToRequest(const ModelFlags& f) {
  state::ModelRequest request;
  request.scenarios = f.scenarios;
  request.compare = f.compare;
  request.semantics = *state::ParseSemantics(f.semantics);
  request.microbatches = f.microbatches;
  request.trace_out = f.trace_out;
  if (f.scenarios.empty()) {
    request.layout.layers = f.layers;
    request.layout.linears_per_layer = f.linears_per_layer;
    state::ParseLayoutCheckpoint(f.checkpoint, &request.layout.checkpoint);
    request.layout.segments = *state::ParseSegments(f.segments);
    request.layout.eval = f.eval;
    request.layout.backward_inside_autocast = f.backward == "inside";
  }
  return request;
}

void Say(const std::string& line) {
  std::cerr << "fp8audit model: " << reports::Printable(line, 1 << 16) << "\n";
}

// Text for a terminal: each line's control characters (a scenario's names are the user's, not
// ours: ESC, OSC, BEL, bidirectional overrides) neutralised as in the reports.
std::string PrintableLines(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += reports::Printable(std::string_view(text).substr(start, end - start), end - start);
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

// --trace-out FILE is written as `report -o` writes: a regular file (or a link at FILE) replaced
// atomically, a device or FIFO in place; never over a scenario being read.
bool TraceOutTarget(const ModelFlags& f, std::string* write_to, std::string* error) {
  reports::OutputTarget target;
  if (!reports::ClassifyOutput(f.trace_out, &target, error)) return false;
  for (const std::string& scenario : f.scenarios) {
    if (reports::SameFile(f.trace_out, scenario)) {
      *error = f.trace_out + ": the scenario " + scenario + " is read from it: name another file";
      return false;
    }
  }
  if (target == reports::OutputTarget::kInPlace) {
    *write_to = f.trace_out;
    return true;
  }
  *write_to = reports::TemporaryBeside(f.trace_out, error);
  return !write_to->empty();
}

int RunModel(const ModelFlags& f) {
  std::string error;
  state::ModelRequest request = ToRequest(f);
  if (!f.trace_out.empty() && !TraceOutTarget(f, &request.trace_out, &error)) {
    Say("--trace-out " + error);
    return kExitUsage;
  }
  const bool replace = !request.trace_out.empty() && request.trace_out != f.trace_out;
  const std::optional<state::ModelReport> report = state::Predict(request, &error);
  if (replace && (!report || ::rename(request.trace_out.c_str(), f.trace_out.c_str()) != 0)) {
    if (report) error = f.trace_out + ": " + std::strerror(errno);
    ::unlink(request.trace_out.c_str());
    if (report) {
      Say("--trace-out " + error);
      return kExitUsage;
    }
  }
  if (!report) {
    Say(error);
    return kExitUsage;
  }
  std::string out;
  const bool json = f.format == "json";
  if (!state::RenderModel(*report, json ? state::ModelFormat::kJson : state::ModelFormat::kText,
                          f.max_explanations, &out)) {
    Say("could not render JSON");
    return kExitInternal;
  }
  if (!reports::WriteAll(STDOUT_FILENO, json ? out : PrintableLines(out))) {
    Say(std::string("cannot write to standard output: ") + std::strerror(errno));
    return kExitUsage;
  }
  return f.check && !report->passed() ? kExitViolation : kExitOk;
}

}  // namespace

void AddModelCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ModelFlags>();
  CLI::App* sub = app.add_subcommand(
      "model",
      "Predict global FP8 DelayedScaling state updates per logical microbatch for a scenario "
      "(Protobuf text format) or a generated checkpointing layout, under the fixed semantics "
      "(always 1 forward, 1 backward) or those of a Transformer Engine release or change "
      "(--semantics lists them).");
  auto* scenario = sub->add_option("scenario", flags->scenarios, "Scenario file(s) (.textproto)")
                       ->check(CLI::ExistingFile);
  auto* compare =
      sub->add_flag("--compare", flags->compare,
                    "Run each scenario (or the layout) under every TE release's semantics and the "
                    "fixed one: a text table, one row each, a column per semantics (fixed last) "
                    "and the fixed verdict, which --check judges; not with --format json");
  auto* semantics = sub->add_option("--semantics", flags->semantics,
                                    "Ownership semantics: " + std::string(state::kSemanticsNames));
  semantics
      ->check(
          [](const std::string& name) {
            return state::ParseSemantics(name)
                       ? std::string()
                       : "unknown semantics '" + name +
                             "' (known: " + std::string(state::kSemanticsNames) + ")";
          },
          "SEMANTICS")
      ->capture_default_str();
  sub->add_option("--microbatches", flags->microbatches,
                  "Microbatches to run (default: the scenario's count, or 1 for a layout)")
      ->transform(Decimal())
      ->check(CLI::Range(1u, 1000000u));
  sub->add_option("--format", flags->format, "Output format (--compare: text only)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  auto* layers = sub->add_option("--layers", flags->layers, "Generate a layout of L layers")
                     ->transform(Decimal())
                     ->check(CLI::Range(1u, 100000u));
  sub->add_option("--linears-per-layer", flags->linears_per_layer, "Linear modules per layer")
      ->transform(Decimal())
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str()
      ->needs(layers);
  sub->add_option("--checkpoint", flags->checkpoint, "Activation checkpointing of the layout")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(state::kLayoutCheckpointNames),
                                                     std::end(state::kLayoutCheckpointNames))))
      ->capture_default_str()
      ->needs(layers);
  sub->add_option("--segments", flags->segments,
                  "Checkpoint segments: one around the stack, one per layer, or nested (one "
                  "around the stack with the first layer in its own)")
      ->check(CLI::IsMember({"single", "per-layer", "nested"}))
      ->capture_default_str()
      ->needs(layers);
  sub->add_flag("--eval", flags->eval, "Layout modules in eval mode")->needs(layers);
  sub->add_option("--backward", flags->backward,
                  "Where the layout's backward runs: after the autocast closed, or inside it")
      ->check(CLI::IsMember({"after", "inside"}))
      ->capture_default_str()
      ->needs(layers);
  sub->add_flag("--check", flags->check,
                "Exit 3 when any microbatch differs from the expected counts or a violation "
                "is found (with --compare: when a row's fixed verdict is FAIL)");
  auto* trace_out = sub->add_option("--trace-out", flags->trace_out,
                                    "Also write the model's event stream as an .fp8trace file");
  auto* max_explanations = sub->add_option("--max-explanations", flags->max_explanations,
                                           "Explanation lines shown in text output")
                               ->transform(Decimal())
                               ->capture_default_str();
  scenario->excludes(layers);
  // A comparison runs every semantics and prints a text table: the flags of one semantics' run
  // (which one, its trace, its explanations) are refused before anything is run or written.
  compare->excludes(semantics)->excludes(trace_out)->excludes(max_explanations);
  sub->footer(WithExamples(
      std::string("Give either SCENARIO (several with --compare) or --layers.\n") +
          "Limits: a scenario file of at most " + std::to_string(state::kMaxScenarioBytes >> 20) +
          " MiB, ops nested at most " + std::to_string(state::kMaxOpNesting) +
          " deep, module names of at most " + std::to_string(state::kMaxNameBytes) +
          " bytes;\nat most " + std::to_string(state::kMaxExpandedOps) +
          " ops executed per run (repeats, recomputes, microbatches and modules included).\n"
          "--trace-out FILE replaces a regular file (or a symbolic link at FILE) atomically and "
          "writes\n"
          "a device or FIFO in place. Text output shows control characters of the scenario's "
          "names\n"
          "as '?'.\n"
          "Exit codes: 0 prediction printed; 2 bad flags, malformed scenario (one line naming\n"
          "file:line:column), a limit exceeded, or the output could not be written (--trace-out,\n"
          "standard output: a full disk, a directory, the scenario itself); 3 with --check when a\n"
          "microbatch differs from the expectation (with --compare: a fixed verdict is FAIL).",
      {"fp8audit model --layers 28 --linears-per-layer 7 --checkpoint reentrant --segments "
       "per-layer --semantics te-2.20",
       "fp8audit model --compare state/scenarios/*.textproto   # every TE release and fixed"}));
  sub->callback([flags, exit_code, sub] {
    if (flags->scenarios.empty() && flags->layers == 0) {
      throw CLI::RequiredError("SCENARIO or --layers");
    }
    // The table has no JSON form: refused as the parser refuses the flags --compare excludes.
    if (flags->compare && flags->format == "json") {
      throw CLI::ExcludesError("--compare", "--format json");
    }
    (void)sub;
    *exit_code = RunModel(*flags);
  });
}

}  // namespace fp8audit::cli
