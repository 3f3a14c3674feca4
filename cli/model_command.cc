// `fp8audit model`: predicts FP8 state updates per microbatch for a scenario or a generated
// checkpointing layout, under the fixed or Transformer Engine's current semantics.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "proto/trace_io.h"
#include "state/layouts.h"
#include "state/scenario.h"
#include "state/scenario_runner.h"

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
  std::string checkpoint = "none";
  std::string segments = "per-layer";
  bool eval = false;
  std::string backward = "after";
  bool check = false;
  std::string trace_out;
  uint32_t max_explanations = 20;
};

void PrintText(const v1::ModelResult& r, const state::RunOutcome& outcome, uint32_t max_lines) {
  std::printf("scenario:  %s\n", r.scenario().c_str());
  std::printf("semantics: %s   expected per microbatch: forward %u, backward %u\n\n",
              r.semantics().c_str(), outcome.expect_forward, outcome.expect_backward);
  std::printf("%10s %6s %8s %9s  %s\n", "microbatch", "step", "forward", "backward", "verdict");
  uint32_t failing = 0;
  const v1::MicrobatchResult* first_failing = nullptr;
  for (const auto& m : r.microbatches()) {
    const bool pass = m.verdict() == v1::PASS;
    std::printf("%10u %6u %8u %9u  %s\n", m.index(), m.step(), m.forward_updates(),
                m.backward_updates(), pass ? "ok" : "FAIL");
    if (!pass) {
      ++failing;
      if (!first_failing) first_failing = &m;
    }
  }
  if (first_failing && first_failing->explanations_size() > 0) {
    std::printf("\nwhy (microbatch %u):\n", first_failing->index());
    int shown = 0;
    for (const auto& e : first_failing->explanations()) {
      if (shown++ == static_cast<int>(max_lines)) {
        std::printf("  ... and %d more (--format json lists them all)\n",
                    first_failing->explanations_size() - static_cast<int>(max_lines));
        break;
      }
      std::printf("  %s\n", e.c_str());
    }
  }
  if (r.violations_size() > 0) {
    std::printf("\nviolations:\n");
    for (const auto& v : r.violations()) {
      std::printf("  microbatch %u: %s: %s\n", v.microbatch(),
                  v1::Violation::Kind_Name(v.kind()).c_str(), v.message().c_str());
    }
  }
  std::printf("\nverdict: %s", r.verdict() == v1::PASS ? "PASS" : "FAIL");
  if (failing) {
    std::printf(" (%u of %d microbatches differ from %u/%u)", failing, r.microbatches_size(),
                outcome.expect_forward, outcome.expect_backward);
  }
  if (r.violations_size()) std::printf(" (%d violations)", r.violations_size());
  std::printf("\n");
}

bool WriteTrace(const std::string& path, const state::CompiledScenario& sc,
                const state::RunOutcome& outcome, std::string* error) {
  auto writer = TraceFileWriter::Create(path, error);
  if (!writer) return false;
  v1::TraceRecord header;
  auto* h = header.mutable_header();
  h->set_schema_version(1);
  h->set_rank(-1);
  h->add_command("fp8audit");
  h->add_command("model");
  h->set_agent_version(FP8AUDIT_VERSION);
  h->set_expect_forward(outcome.expect_forward);
  h->set_expect_backward(outcome.expect_backward);
  h->set_markers("model");
  std::string buffer;
  AppendRecord(header, &buffer);
  v1::TraceRecord record;
  uint64_t seq = 0;
  for (const auto& e : outcome.events) {
    *record.mutable_event() = state::ToTraceEvent(sc, e);
    record.mutable_event()->set_timestamp_ns(++seq);
    AppendRecord(record, &buffer);
    if (buffer.size() > (1u << 20)) {
      if (!writer->WriteFramed(buffer)) break;
      buffer.clear();
    }
  }
  v1::TraceRecord footer;
  footer.mutable_footer()->set_events(outcome.events.size());
  AppendRecord(footer, &buffer);
  if (!writer->WriteFramed(buffer)) {
    *error = path + ": write failed";
    return false;
  }
  return true;
}

// "F/B" when every microbatch agrees, else the list.
std::string CountsCell(const state::RunOutcome& r) {
  std::vector<std::string> cells;
  for (const auto& m : r.microbatches) {
    cells.push_back(m.aborted ? std::string("raised")
                              : std::to_string(m.forward_updates) + "/" +
                                    std::to_string(m.backward_updates));
  }
  std::string cell;
  const bool uniform =
      std::all_of(cells.begin(), cells.end(), [&](const auto& c) { return c == cells[0]; });
  for (const auto& c : cells) {
    cell += (cell.empty() ? "" : ",") + c;
    if (uniform) break;
  }
  if (!r.violations.empty()) cell += " +" + std::to_string(r.violations.size()) + " viol.";
  return cell;
}

std::optional<state::CompiledScenario> Load(const ModelFlags& f, const std::string& path,
                                            std::string* error) {
  if (!path.empty()) return state::LoadAndCompileScenario(path, error);
  state::LayoutSpec spec;
  spec.layers = f.layers;
  spec.linears_per_layer = f.linears_per_layer;
  spec.checkpoint = *state::ParseCheckpointMode(f.checkpoint);
  spec.segments = *state::ParseSegments(f.segments);
  spec.eval = f.eval;
  spec.backward_inside_autocast = f.backward == "inside";
  spec.microbatches = f.microbatches ? f.microbatches : 1;
  return state::CompileScenario(state::MakeLayout(spec), error, "<layout>");
}

// One row per scenario: counts per microbatch under te-legacy and fixed, side by side.
int RunCompare(const ModelFlags& f) {
  std::vector<std::string> inputs = f.scenarios;
  if (inputs.empty()) inputs.push_back("");
  std::printf("%-46s %-22s %-22s %s\n", "scenario", "te-legacy fwd/bwd", "fixed fwd/bwd",
              "fixed verdict");
  bool all_pass = true;
  for (const std::string& path : inputs) {
    std::string error;
    const auto sc = Load(f, path, &error);
    if (!sc) {
      std::cerr << "fp8audit model: " << error << "\n";
      return kExitUsage;
    }
    state::RunOptions o;
    o.microbatches = f.microbatches;
    o.semantics = state::Semantics::kTeLegacy;
    const auto legacy = state::RunScenario(*sc, o);
    o.semantics = state::Semantics::kFixed;
    const auto fixed = state::RunScenario(*sc, o);
    all_pass = all_pass && fixed.passed();
    std::printf("%-46s %-22s %-22s %s\n", sc->name.c_str(), CountsCell(legacy).c_str(),
                CountsCell(fixed).c_str(), fixed.passed() ? "PASS" : "FAIL");
  }
  std::cout.flush();
  return f.check && !all_pass ? kExitViolation : kExitOk;
}

int RunModel(const ModelFlags& f) {
  if (f.compare) return RunCompare(f);
  if (f.scenarios.size() > 1) {
    std::cerr << "fp8audit model: several scenarios need --compare\n";
    return kExitUsage;
  }
  const auto semantics = state::ParseSemantics(f.semantics);
  std::string error;
  std::optional<state::CompiledScenario> sc =
      Load(f, f.scenarios.empty() ? std::string() : f.scenarios[0], &error);
  if (!sc) {
    std::cerr << "fp8audit model: " << error << "\n";
    return kExitUsage;
  }
  state::RunOptions options;
  options.semantics = *semantics;
  options.microbatches = f.microbatches;
  const state::RunOutcome outcome = state::RunScenario(*sc, options);
  const v1::ModelResult result = state::ToModelResult(*sc, outcome);
  if (!f.trace_out.empty() && !WriteTrace(f.trace_out, *sc, outcome, &error)) {
    std::cerr << "fp8audit model: " << error << "\n";
    return kExitUsage;
  }
  if (f.format == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    o.always_print_primitive_fields = true;
    o.add_whitespace = true;
    if (!google::protobuf::util::MessageToJsonString(result, &json, o).ok()) {
      std::cerr << "fp8audit model: could not render JSON\n";
      return kExitInternal;
    }
    std::cout << json;
  } else {
    PrintText(result, outcome, f.max_explanations);
  }
  std::cout.flush();
  return f.check && result.verdict() != v1::PASS ? kExitViolation : kExitOk;
}

}  // namespace

void AddModelCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ModelFlags>();
  CLI::App* sub = app.add_subcommand(
      "model",
      "Predict global FP8 DelayedScaling state updates per logical microbatch for a scenario "
      "(Protobuf text format) or a generated checkpointing layout, under the fixed semantics "
      "(always 1 forward, 1 backward) or Transformer Engine's current ones (te-legacy).");
  auto* scenario = sub->add_option("scenario", flags->scenarios, "Scenario file(s) (.textproto)")
                       ->check(CLI::ExistingFile);
  sub->add_flag("--compare", flags->compare,
                "Run each scenario (or the layout) under te-legacy and fixed semantics and print "
                "one row each, side by side");
  sub->add_option("--semantics", flags->semantics, "Ownership semantics")
      ->check(CLI::IsMember({"fixed", "te-legacy"}))
      ->capture_default_str();
  sub->add_option("--microbatches", flags->microbatches,
                  "Microbatches to run (default: the scenario's count, or 1 for a layout)")
      ->check(CLI::Range(1u, 1000000u));
  sub->add_option("--format", flags->format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  auto* layers = sub->add_option("--layers", flags->layers, "Generate a layout of L layers")
                     ->check(CLI::Range(1u, 100000u));
  sub->add_option("--linears-per-layer", flags->linears_per_layer, "Linear modules per layer")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str()
      ->needs(layers);
  sub->add_option("--checkpoint", flags->checkpoint, "Activation checkpointing of the layout")
      ->check(CLI::IsMember({"none", "reentrant", "non-reentrant"}))
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
                "is found");
  sub->add_option("--trace-out", flags->trace_out,
                  "Also write the model's event stream as an .fp8trace file");
  sub->add_option("--max-explanations", flags->max_explanations,
                  "Explanation lines shown in text output")
      ->capture_default_str();
  scenario->excludes(layers);
  sub->footer(
      "Give either SCENARIO (several with --compare) or --layers.\n"
      "Exit codes: 0 prediction printed; 2 bad flags or malformed scenario (one line naming\n"
      "file:line:column); 3 with --check when a microbatch differs from the expectation.");
  sub->callback([flags, exit_code, sub] {
    if (flags->scenarios.empty() && flags->layers == 0) {
      throw CLI::RequiredError("SCENARIO or --layers");
    }
    (void)sub;
    *exit_code = RunModel(*flags);
  });
}

}  // namespace fp8audit::cli
