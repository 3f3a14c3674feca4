#include "state/predict.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "proto/trace_io.h"

namespace fp8audit::state {

namespace {

[[gnu::format(printf, 2, 3)]] void Appendf(std::string* out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n > 0) {
    const size_t at = out->size();
    out->resize(at + static_cast<size_t>(n) + 1);
    std::vsnprintf(out->data() + at, static_cast<size_t>(n) + 1, format, args);
    out->resize(at + static_cast<size_t>(n));
  }
  va_end(args);
}

// Compiles the input and checks the run asked for against the limits.
std::optional<CompiledScenario> Load(const ModelRequest& request, const std::string& path,
                                     std::string* error) {
  if (!path.empty()) {
    std::optional<CompiledScenario> sc = LoadAndCompileScenario(path, error);
    if (sc && request.microbatches && !CheckLimits(*sc, request.microbatches, error, path)) {
      return std::nullopt;
    }
    return sc;
  }
  LayoutSpec spec = request.layout;
  spec.microbatches = request.microbatches ? request.microbatches : 1;
  // A lower bound (each module declared, reset and called once per microbatch), checked before
  // the layout is built; compilation counts the rest.
  const uint64_t modules = uint64_t{spec.layers} * spec.linears_per_layer;
  if (2 * modules * spec.microbatches > kMaxExpandedOps) {
    *error = "<layout>: " + std::to_string(spec.microbatches) + " microbatches of " +
             std::to_string(spec.layers) + " layers x " + std::to_string(spec.linears_per_layer) +
             " Linear modules exceed the limit of " + std::to_string(kMaxExpandedOps) +
             " ops executed";
    return std::nullopt;
  }
  return CompileScenario(MakeLayout(spec), error, "<layout>");
}

bool WriteTrace(const std::string& path, const CompiledScenario& sc, const RunOutcome& outcome,
                std::string* error) {
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
    *record.mutable_event() = ToTraceEvent(sc, e);
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

void RenderText(const Prediction& p, uint32_t max_lines, std::string* out) {
  const v1::ModelResult& r = p.result;
  const Prediction& outcome = p;
  Appendf(out, "scenario:  %s\n", r.scenario().c_str());
  Appendf(out, "semantics: %s   expected per microbatch: forward %u, backward %u\n\n",
          r.semantics().c_str(), outcome.expect_forward, outcome.expect_backward);
  Appendf(out, "%10s %6s %8s %9s  %s\n", "microbatch", "step", "forward", "backward", "verdict");
  uint32_t failing = 0;
  const v1::MicrobatchResult* first_failing = nullptr;
  for (const auto& m : r.microbatches()) {
    const bool pass = m.verdict() == v1::PASS;
    Appendf(out, "%10u %6u %8u %9u  %s\n", m.index(), m.step(), m.forward_updates(),
            m.backward_updates(), pass ? "ok" : "FAIL");
    if (!pass) {
      ++failing;
      if (!first_failing) first_failing = &m;
    }
  }
  if (first_failing && first_failing->explanations_size() > 0) {
    Appendf(out, "\nwhy (microbatch %u):\n", first_failing->index());
    int shown = 0;
    for (const auto& e : first_failing->explanations()) {
      if (shown++ == static_cast<int>(max_lines)) {
        Appendf(out, "  ... and %d more (--format json lists them all)\n",
                first_failing->explanations_size() - static_cast<int>(max_lines));
        break;
      }
      Appendf(out, "  %s\n", e.c_str());
    }
  }
  if (r.violations_size() > 0) {
    Appendf(out, "\nviolations:\n");
    for (const auto& v : r.violations()) {
      Appendf(out, "  microbatch %u: %s: %s\n", v.microbatch(),
              v1::Violation::Kind_Name(v.kind()).c_str(), v.message().c_str());
    }
  }
  Appendf(out, "\nverdict: %s", r.verdict() == v1::PASS ? "PASS" : "FAIL");
  if (failing) {
    Appendf(out, " (%u of %d microbatches differ from %u/%u)", failing, r.microbatches_size(),
            outcome.expect_forward, outcome.expect_backward);
  }
  if (r.violations_size()) Appendf(out, " (%d violations)", r.violations_size());
  Appendf(out, "\n");
}

CompareColumn Column(const RunOutcome& r) {
  CompareColumn c;
  c.microbatches.reserve(r.microbatches.size());
  for (const auto& m : r.microbatches) {
    c.microbatches.push_back({m.forward_updates, m.backward_updates, m.aborted, m.raised});
  }
  c.violations = r.violations.size();
  c.passed = r.passed();
  return c;
}

// "F/B" when every microbatch agrees, else the list.
std::string CountsCell(const CompareColumn& r) {
  std::vector<std::string> cells;
  for (const auto& m : r.microbatches) {
    cells.push_back(m.aborted ? std::string("raised")
                              : std::to_string(m.forward) + "/" + std::to_string(m.backward));
  }
  std::string cell;
  const bool uniform =
      std::all_of(cells.begin(), cells.end(), [&](const auto& c) { return c == cells[0]; });
  for (const auto& c : cells) {
    cell += (cell.empty() ? "" : ",") + c;
    if (uniform) break;
  }
  if (r.violations) cell += " +" + std::to_string(r.violations) + " viol.";
  return cell;
}

// A fixed column that fails only where the scenario's own exception left a microbatch without its
// backward pass (F/0), every other microbatch 1/1.
bool FailsOnlyWhereTheJobRaised(const CompareColumn& c) {
  bool raised = false;
  for (const auto& m : c.microbatches) {
    if (m.backward == 0 && !m.aborted && m.raised) {
      raised = true;
    } else if (m.aborted || m.forward != 1 || m.backward != 1) {
      return false;
    }
  }
  return raised;
}

void RenderCompare(const std::vector<CompareRow>& rows, std::string* out) {
  if (rows.empty()) return;
  // Every column as wide as its widest cell: a long scenario name never pushes a row out of line.
  size_t name_width = std::string("scenario").size();
  std::vector<size_t> widths;
  for (const CompareColumn& c : rows[0].columns) {
    widths.push_back((std::string(SemanticsName(c.semantics)) + " fwd/bwd").size());
  }
  for (const CompareRow& row : rows) {
    name_width = std::max(name_width, row.name.size());
    for (size_t i = 0; i < row.columns.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], CountsCell(row.columns[i]).size());
    }
  }
  const auto cell = [&](const std::string& text, size_t width) {
    Appendf(out, "%-*s  ", static_cast<int>(width), text.c_str());
  };
  cell("scenario", name_width);
  for (size_t i = 0; i < widths.size(); ++i) {
    cell(std::string(SemanticsName(rows[0].columns[i].semantics)) + " fwd/bwd", widths[i]);
  }
  Appendf(out, "%s\n", "fixed verdict");
  std::vector<std::string> raised, other;
  for (const CompareRow& row : rows) {
    cell(row.name, name_width);
    for (size_t i = 0; i < widths.size(); ++i) cell(CountsCell(row.columns[i]), widths[i]);
    const bool passed = row.fixed().passed;
    Appendf(out, "%s\n", passed ? "PASS" : "FAIL");
    if (!passed) (FailsOnlyWhereTheJobRaised(row.fixed()) ? raised : other).push_back(row.name);
  }
  const auto list = [](const std::vector<std::string>& names) {
    std::string joined;
    for (const std::string& n : names) joined += (joined.empty() ? "\"" : ", \"") + n + "\"";
    return joined;
  };
  Appendf(out,
          "\nF/B: forward/backward updates per microbatch (a list where they differ); raised: "
          "that release's TE raises in the microbatch; +N viol.: N broken ownership rules; why: "
          "fp8audit model SCENARIO --semantics NAME\n");
  if (!raised.empty()) {
    Appendf(out,
            "FAIL under fixed in %s: the job raises there, so one microbatch's backward pass "
            "never runs and it has no backward update (F/0), as intended; every other microbatch "
            "is 1/1.\n",
            list(raised).c_str());
  }
  if (!other.empty()) {
    Appendf(out,
            "FAIL under fixed in %s: the fixed ownership does not give 1/1 there (fp8audit model "
            "SCENARIO --semantics fixed says why).\n",
            list(other).c_str());
  }
}

// The TE releases' semantics in registration order, then the fixed one.
std::vector<Semantics> CompareOrder() {
  std::vector<Semantics> order;
  for (Semantics s : AllSemantics()) {
    if (s != Semantics::kFixed) order.push_back(s);
  }
  order.push_back(Semantics::kFixed);
  return order;
}

}  // namespace

bool ModelReport::passed() const {
  if (prediction) return prediction->result.verdict() == v1::PASS;
  return std::all_of(rows.begin(), rows.end(),
                     [](const CompareRow& r) { return r.fixed().passed; });
}

const CompareColumn* CompareRow::of(Semantics s) const {
  for (const CompareColumn& c : columns) {
    if (c.semantics == s) return &c;
  }
  return nullptr;
}

std::optional<ModelReport> Predict(const ModelRequest& request, std::string* error) {
  if (!request.compare && request.scenarios.size() > 1) {
    *error = "several scenarios need --compare";
    return std::nullopt;
  }
  if (request.compare && !request.trace_out.empty()) {
    *error = "--trace-out writes one semantics' events: not with --compare";
    return std::nullopt;
  }
  std::vector<std::string> inputs = request.scenarios;
  if (inputs.empty()) inputs.push_back("");
  std::vector<CompiledScenario> compiled;
  for (const std::string& path : inputs) {
    std::optional<CompiledScenario> sc = Load(request, path, error);
    if (!sc) return std::nullopt;
    compiled.push_back(std::move(*sc));
  }
  ModelReport report;
  RunOptions options;
  options.microbatches = request.microbatches;
  if (request.compare) {
    options.record_events = false;  // counts only
    for (const CompiledScenario& sc : compiled) {
      CompareRow row;
      row.name = sc.name;
      for (Semantics s : CompareOrder()) {
        options.semantics = s;
        row.columns.push_back(Column(RunScenario(sc, options)));
        row.columns.back().semantics = s;
      }
      report.rows.push_back(std::move(row));
    }
    return report;
  }
  options.semantics = request.semantics;
  RunOutcome outcome = RunScenario(compiled[0], options);
  if (!request.trace_out.empty() && !WriteTrace(request.trace_out, compiled[0], outcome, error)) {
    return std::nullopt;
  }
  Prediction p;
  p.expect_forward = outcome.expect_forward;
  p.expect_backward = outcome.expect_backward;
  p.result = ToModelResult(compiled[0], std::move(outcome));
  report.prediction = std::move(p);
  return report;
}

bool RenderModel(const ModelReport& report, ModelFormat format, uint32_t max_explanations,
                 std::string* out) {
  if (!report.prediction) {
    RenderCompare(report.rows, out);
    return true;
  }
  if (format == ModelFormat::kText) {
    RenderText(*report.prediction, max_explanations, out);
    return true;
  }
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  o.add_whitespace = true;
  return google::protobuf::util::MessageToJsonString(report.prediction->result, out, o).ok();
}

}  // namespace fp8audit::state
