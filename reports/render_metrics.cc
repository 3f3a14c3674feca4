// Metrics: one JSON object per line and per microbatch, written as each microbatch closes, for
// wandb.log, TensorBoard and the like (see render.h).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/render.h"

namespace fp8audit::reports {
namespace {

using Json = nlohmann::ordered_json;

class Metrics final : public StreamRenderer {
 public:
  explicit Metrics(OutputStream* out) : out_(out) {}

  void Begin(const std::vector<std::string>& /*files*/) override {}
  void OnTrace(size_t /*index*/, const std::string& /*path*/) override {
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
    Json line = Json::object();
    line["rank"] = rank_;
    line["step"] = row.step();
    line["microbatch"] = row.index();
    line["forward"] = row.forward_updates();
    line["backward"] = row.backward_updates();
    line["expected_forward"] = row.expected_forward();
    line["expected_backward"] = row.expected_backward();
    line["verdict"] = row.verdict() == v1::FAIL ? "fail" : "pass";
    if (probes_ && row.has_by_source()) {
      Json by = Json::object();
      const v1::SourceTallies& s = row.by_source();
      if (s.has_kernel()) by["kernel"] = Tally(s.kernel());
      if (s.has_te_call()) by["te_call"] = Tally(s.te_call());
      if (s.has_python_hook()) by["python_hook"] = Tally(s.python_hook());
      if (s.has_other()) by["other"] = Tally(s.other());
      line["by_source"] = std::move(by);
    }
    if (probes_ && row.probe_notes_size() > 0) {
      line["probe_notes"] =
          Json(std::vector<std::string>(row.probe_notes().begin(), row.probe_notes().end()));
    }
    out_->Write(line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  }
  void Finish(const TraceSetResult& /*result*/) override {}

 private:
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
};

}  // namespace

std::unique_ptr<StreamRenderer> MakeMetricsRenderer(OutputStream* out) {
  return std::make_unique<Metrics>(out);
}

}  // namespace fp8audit::reports
