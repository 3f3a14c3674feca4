#include "agent/src/live_check.h"

#include <gtest/gtest.h>

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

v1::Event Ev(v1::EventKind kind, v1::Pass pass, const std::string& detail = "",
             v1::Source source = v1::NVTX) {
  static uint64_t ts = 1;
  v1::Event e;
  e.set_kind(kind);
  e.set_pass(pass);
  e.set_detail(detail);
  e.set_source(source);
  e.set_thread_id(pass == v1::BACKWARD ? 20 : 10);
  e.set_timestamp_ns(ts++ * 1000);
  return e;
}

TEST(AgentLiveCheck, DescribesExtraAndMissingUpdates) {
  v1::MicrobatchResult row;
  row.set_index(4);
  row.set_forward_updates(2);
  row.set_backward_updates(0);
  row.set_expected_forward(1);
  row.set_expected_backward(1);
  *row.add_updates() = Ev(v1::UPDATE_FORWARD, v1::FORWARD);
  *row.add_updates() = Ev(v1::UPDATE_FORWARD, v1::BACKWARD,
                          "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::"
                          "amax_and_scale_update_impl::kernel_bulk(float*, unsigned long, float)",
                          v1::KERNEL);
  EXPECT_EQ(DescribeFailure(row, ""),
            "microbatch 4: forward updates 2 (expected 1), backward updates 0 (expected 1): "
            "extra forward update kernel transformer_engine::delayed_scaling_recipe::(anonymous "
            "namespace)::amax_and_scale_update_impl::kernel_bulk in the backward pass (thread 20); "
            "missing backward update");
}

TEST(AgentLiveCheck, FallsBackToTheExcessEvent) {
  v1::MicrobatchResult row;
  row.set_index(0);
  row.set_forward_updates(1);
  row.set_backward_updates(3);
  row.set_expected_forward(1);
  row.set_expected_backward(1);
  EXPECT_EQ(DescribeFailure(row, "backward update nvtx 'update.backward' in the backward pass"),
            "microbatch 0: forward updates 1 (expected 1), backward updates 3 (expected 1): extra "
            "backward update nvtx 'update.backward' in the backward pass");
}

#if FP8AUDIT_AGENT_HAVE_AUDITOR
TEST(AgentLiveCheck, FindsTheFirstFailingMicrobatchWithTheAuditor) {
  Config config;
  LiveCheck live(config);
  ASSERT_TRUE(live.available());
  v1::TraceHeader header;
  header.set_schema_version(1);
  header.set_expect_forward(1);
  header.set_expect_backward(1);
  live.OnHeader(header);
  for (int mb = 0; mb < 3; ++mb) {
    live.OnEvent(Ev(v1::MICROBATCH_BEGIN, v1::FORWARD, "fp8audit.microbatch"));
    live.OnEvent(Ev(v1::UPDATE_FORWARD, v1::FORWARD, "update.forward"));
    if (mb == 1) live.OnEvent(Ev(v1::UPDATE_FORWARD, v1::BACKWARD, "update.forward"));
    live.OnEvent(Ev(v1::BACKWARD_BEGIN, v1::BACKWARD));
    live.OnEvent(Ev(v1::UPDATE_BACKWARD, v1::BACKWARD, "update.backward"));
    live.OnEvent(Ev(v1::BACKWARD_END, v1::FORWARD));
    live.OnEvent(Ev(v1::MICROBATCH_END, v1::FORWARD, "fp8audit.microbatch"));
  }
  v1::TraceFooter footer;
  footer.set_events(21);
  live.Finish(footer);
  EXPECT_EQ(live.microbatches(), 3u);
  EXPECT_EQ(live.failing(), 1u);
  EXPECT_EQ(live.first_failure().rfind("microbatch 1: forward updates 2 (expected 1), backward "
                                       "updates 1 (expected 1): extra forward update nvtx "
                                       "'update.forward' in the backward pass",
                                       0),
            0u)
      << live.first_failure();
}

TEST(AgentLiveCheck, JobsWithoutAnyUpdateAreNotFlaggedLive) {
  LiveCheck live(Config{});
  v1::TraceHeader header;
  header.set_schema_version(1);
  live.OnHeader(header);
  for (int mb = 0; mb < 3; ++mb) {
    live.OnEvent(Ev(v1::MICROBATCH_BEGIN, v1::FORWARD, "fp8audit.microbatch"));
    live.OnEvent(Ev(v1::BACKWARD_BEGIN, v1::BACKWARD));
    live.OnEvent(Ev(v1::BACKWARD_END, v1::FORWARD));
    live.OnEvent(Ev(v1::MICROBATCH_END, v1::FORWARD, "fp8audit.microbatch"));
  }
  // Then FP8 starts: a microbatch missing its backward update is judged.
  live.OnEvent(Ev(v1::MICROBATCH_BEGIN, v1::FORWARD, "fp8audit.microbatch"));
  live.OnEvent(Ev(v1::UPDATE_FORWARD, v1::FORWARD, "update.forward"));
  live.OnEvent(Ev(v1::BACKWARD_BEGIN, v1::BACKWARD));
  live.OnEvent(Ev(v1::BACKWARD_END, v1::FORWARD));
  live.OnEvent(Ev(v1::MICROBATCH_END, v1::FORWARD, "fp8audit.microbatch"));
  live.Finish(v1::TraceFooter());
  EXPECT_EQ(live.microbatches(), 4u);
  EXPECT_EQ(live.failing(), 1u);
  EXPECT_EQ(live.first_failure().rfind("microbatch 3: forward updates 1 (expected 1), backward "
                                       "updates 0 (expected 1): missing backward update",
                                       0),
            0u)
      << live.first_failure();
}
#endif

}  // namespace
}  // namespace fp8audit::agent
