// Metrics: one JSON object per line and per microbatch, written as each microbatch closes, for
// wandb.log, TensorBoard and the like (see render.h).
#include <nlohmann/json.hpp>

#include "reports/render.h"

namespace fp8audit::reports {
namespace {

using Json = nlohmann::ordered_json;

class Metrics final : public StreamRenderer {
 public:
  explicit Metrics(OutputStream* out) : out_(out) {}

  void Begin(const std::vector<std::string>& /*files*/) override {}
  void OnTrace(size_t /*index*/, const std::string& /*path*/) override { rank_ = -1; }
  void OnHeader(const v1::TraceHeader& header) override { rank_ = header.rank(); }
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
    out_->Write(line.dump() + "\n");
  }
  void Finish(const TraceSetResult& /*result*/) override {}

 private:
  OutputStream* out_;
  int32_t rank_ = -1;
};

}  // namespace

std::unique_ptr<StreamRenderer> MakeMetricsRenderer(OutputStream* out) {
  return std::make_unique<Metrics>(out);
}

}  // namespace fp8audit::reports
