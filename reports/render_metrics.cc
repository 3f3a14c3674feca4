// Metrics: one JSON object per line and per microbatch, written as each microbatch closes, for
// wandb.log, TensorBoard and the like (see render.h).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "reports/render.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

using Json = nlohmann::ordered_json;

// Lines held back while no microbatch of the job had an update (their verdict waits for the
// outcome: nothing audited, or a failure); past this many they are written as the audit judged
// each microbatch.
constexpr size_t kMaxHeld = 16384;

class Metrics final : public StreamRenderer {
 public:
  explicit Metrics(OutputStream* out) : out_(out) {}

  void Begin(const std::vector<std::string>& /*files*/) override {}
  void OnTrace(size_t index, const std::string& /*path*/) override {
    trace_ = index;
    rank_ = -1;
    probes_ = false;
  }
  void OnHeader(const v1::TraceHeader& header) override {
    rank_ = header.rank();
    // An agent that names its probes: each line says what each one saw (older traces' lines
    // stay as they were).
    probes_ = !header.probe_mode().empty() || header.probes_size() > 0;
  }
  void OnMicrobatch(const v1::MicrobatchResult& row, const MicrobatchSpan& /*span*/) override {
    if (holding_ && row.forward_updates() == 0 && row.backward_updates() == 0 &&
        held_.size() < kMaxHeld) {
      Held h{trace_, rank_, probes_, row};
      h.row.clear_explanations();
      h.row.clear_updates();
      held_.push_back(std::move(h));
      return;
    }
    // An update (or too many held): the job's outcome is not nothing audited, or too late to wait.
    Flush(nullptr);
    Write(rank_, probes_, row, MicrobatchVerdict(row, v1::AuditReport::OUTCOME_UNSPECIFIED));
  }
  void Finish(const TraceSetResult& result) override { Flush(&result.file_outcomes); }

 private:
  struct Held {
    size_t trace = 0;
    int32_t rank = -1;
    bool probes = false;
    v1::MicrobatchResult row;
  };

  // The held lines, each with the verdict the audit gave it in its trace (`outcomes`: each file's
  // trace outcome; null: not known yet). Holds nothing more.
  void Flush(const std::vector<v1::AuditReport::Outcome>* outcomes) {
    holding_ = false;
    for (const Held& h : held_) {
      const auto outcome = outcomes != nullptr && h.trace < outcomes->size()
                               ? (*outcomes)[h.trace]
                               : v1::AuditReport::OUTCOME_UNSPECIFIED;
      Write(h.rank, h.probes, h.row, MicrobatchVerdict(h.row, outcome));
    }
    held_.clear();
    held_.shrink_to_fit();
  }

  void Write(int32_t rank, bool probes, const v1::MicrobatchResult& row, VerdictName verdict) {
    Json line = Json::object();
    line["rank"] = rank;
    line["step"] = row.step();
    line["microbatch"] = row.index();
    line["forward"] = row.forward_updates();
    line["backward"] = row.backward_updates();
    line["expected_forward"] = row.expected_forward();
    line["expected_backward"] = row.expected_backward();
    line["verdict"] = std::string(Word(verdict));
    if (probes && row.has_by_source()) {
      Json by = Json::object();
      const v1::SourceTallies& s = row.by_source();
      if (s.has_kernel()) by["kernel"] = Tally(s.kernel());
      if (s.has_te_call()) by["te_call"] = Tally(s.te_call());
      if (s.has_python_hook()) by["python_hook"] = Tally(s.python_hook());
      if (s.has_other()) by["other"] = Tally(s.other());
      line["by_source"] = std::move(by);
    }
    if (probes && row.probe_notes_size() > 0) {
      line["probe_notes"] =
          Json(std::vector<std::string>(row.probe_notes().begin(), row.probe_notes().end()));
    }
    out_->Write(line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  }

  // A tally's fields that are not 0, named as in report.proto.
  static Json Tally(const v1::ProbeTally& t) {
    Json j = Json::object();
    auto put = [&](const char* key, uint32_t v) {
      if (v != 0) j[key] = v;
    };
    put("forward", t.forward());
    put("backward", t.backward());
    put("crosscheck_forward", t.crosscheck_forward());
    put("crosscheck_backward", t.crosscheck_backward());
    put("unfused_forward", t.unfused_forward());
    put("unfused_backward", t.unfused_backward());
    return j;
  }

  OutputStream* out_;
  int32_t rank_ = -1;
  bool probes_ = false;
  size_t trace_ = 0;
  bool holding_ = true;  // no microbatch with an update yet
  std::vector<Held> held_;
};

}  // namespace

std::unique_ptr<StreamRenderer> MakeMetricsRenderer(OutputStream* out) {
  return std::make_unique<Metrics>(out);
}

}  // namespace fp8audit::reports
