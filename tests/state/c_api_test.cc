// The C ABI over the model (state/c_api.h), as the Python patch of TE drives it: the framework
// opens the recompute autocast itself and the module forward arrives in two steps.
#include "state/c_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

const std::string kScenarios = std::string(FP8AUDIT_SOURCE_DIR) + "/state/scenarios/";

struct Model {
  explicit Model(const char* semantics = "fixed") : m(fp8audit_model_new(semantics)) {}
  ~Model() { fp8audit_model_free(m); }
  fp8audit_model* m;
};

// One module forward as TE's prepare_forward and first-module check reach the model.
bool Forward(fp8audit_model* m, uint32_t module, bool grad, uint32_t* popped = nullptr) {
  uint32_t p = 0, pushed[4], count = 0;
  EXPECT_EQ(fp8audit_model_module_stash(m, module, grad, &p, pushed, 4, &count), 0);
  if (popped) *popped = p;
  return grad && fp8audit_model_take_ownership(m, module, grad);
}

TEST(ModelCApi, UnknownSemanticsGivesNoModelAndAliasesWork) {
  EXPECT_EQ(fp8audit_model_new("te-2.15"), nullptr);
  for (const char* name : {"fixed", "te-2.20", "te-172bd93", "te-legacy", "te-2.19"}) {
    fp8audit_model* m = fp8audit_model_new(name);
    EXPECT_NE(m, nullptr) << name;
    fp8audit_model_free(m);
  }
  EXPECT_EQ(fp8audit_model_abi(), FP8AUDIT_MODEL_ABI);
}

TEST(ModelCApi, ReentrantPerLayerUnderFixedSemanticsUpdatesOnceEachWay) {
  Model x;
  fp8audit_model* m = x.m;
  fp8audit_model_autocast_enter(m, 1, 1, 1);
  std::vector<uint32_t> frames;
  for (uint32_t layer = 0; layer < 3; ++layer) {
    int direct = 1;
    // TE enters the frame inside its own no_grad: the caller's grad mode is passed explicitly.
    frames.push_back(fp8audit_model_checkpoint_enter(m, 1, 1, 1, &direct));
    EXPECT_EQ(direct, 0);
    EXPECT_TRUE(fp8audit_model_recompute_region(m));
    EXPECT_FALSE(Forward(m, layer, /*grad=*/false));
    fp8audit_model_checkpoint_exit(m, frames.back(), 0);
  }
  EXPECT_EQ(fp8audit_model_autocast_exit(m, 0, 1), 1);
  int owners = 0;
  for (uint32_t layer = 3; layer-- > 0;) {
    ASSERT_EQ(fp8audit_model_recompute_enter(m, frames[layer]), 1);
    EXPECT_TRUE(fp8audit_model_recompute_phase(m));
    fp8audit_model_autocast_enter(m, 1, 1, 1);
    uint32_t popped = 0;
    if (Forward(m, layer, true, &popped)) {
      ++owners;
      EXPECT_EQ(fp8audit_model_owner_backward(m, layer), 1);
    }
    EXPECT_EQ(popped, frames[layer]);
    EXPECT_EQ(fp8audit_model_autocast_exit(m, 0, 1), 0);  // a recompute scope never updates
    fp8audit_model_recompute_exit(m, frames[layer], 0);
  }
  EXPECT_EQ(owners, 1);
  EXPECT_EQ(fp8audit_model_forward_updates(m), 1u);
  EXPECT_EQ(fp8audit_model_backward_updates(m), 1u);
  EXPECT_EQ(fp8audit_model_open_frames(m), 0u);
  EXPECT_EQ(fp8audit_model_autocast_depth(m), 0u);
  EXPECT_EQ(fp8audit_model_take_violations(m), 0u);
}

TEST(ModelCApi, GradModeMirrorsTheCallerAndAutocastExitWithoutGradDoesNotUpdate) {
  Model x;
  fp8audit_model_autocast_enter(x.m, 1, 1, 0);
  EXPECT_FALSE(Forward(x.m, 0, false));
  EXPECT_EQ(fp8audit_model_autocast_exit(x.m, 0, 0), 0);
  fp8audit_model_autocast_enter(x.m, 1, 1, 1);
  EXPECT_TRUE(Forward(x.m, 0, true));
  EXPECT_EQ(fp8audit_model_autocast_exit(x.m, 0, 1), 1);
}

TEST(ModelCApi, FailedRecomputeRollsBackAndTheFrameCanBeRecomputedAgain) {
  Model x;
  fp8audit_model* m = x.m;
  fp8audit_model_autocast_enter(m, 1, 1, 1);
  int direct = 0;
  const uint32_t frame = fp8audit_model_checkpoint_enter(m, 1, 1, 1, &direct);
  Forward(m, 0, false);
  fp8audit_model_checkpoint_exit(m, frame, 0);
  fp8audit_model_autocast_exit(m, 0, 1);
  ASSERT_EQ(fp8audit_model_recompute_enter(m, frame), 1);
  fp8audit_model_autocast_enter(m, 1, 1, 1);
  EXPECT_TRUE(Forward(m, 0, true));
  fp8audit_model_autocast_exit(m, 1, 1);
  fp8audit_model_recompute_exit(m, frame, /*failed=*/1);
  EXPECT_EQ(fp8audit_model_frame_stash(m, frame), 1u);  // the popped stash is back
  ASSERT_EQ(fp8audit_model_recompute_enter(m, frame), 1);
  fp8audit_model_autocast_enter(m, 1, 1, 1);
  EXPECT_TRUE(Forward(m, 0, true));  // the reservation is handed out again
  fp8audit_model_autocast_exit(m, 0, 1);
  fp8audit_model_recompute_exit(m, frame, 0);
  EXPECT_EQ(fp8audit_model_take_violations(m), 0u);
}

TEST(ModelCApi, AnAbandonedFrameDropsItsStashAndCannotBeRecomputed) {
  Model x;
  fp8audit_model* m = x.m;
  fp8audit_model_autocast_enter(m, 1, 1, 1);
  int direct = 0;
  const uint32_t frame = fp8audit_model_checkpoint_enter(m, 0, 1, 1, &direct);
  Forward(m, 0, true);
  fp8audit_model_abandon_frame(m, frame);  // still open: ignored
  EXPECT_EQ(fp8audit_model_frame_stash(m, frame), 1u);
  fp8audit_model_checkpoint_exit(m, frame, 0);
  fp8audit_model_autocast_exit(m, 0, 1);
  fp8audit_model_abandon_frame(m, frame);
  EXPECT_EQ(fp8audit_model_frame_stash(m, frame), 0u);
  EXPECT_EQ(fp8audit_model_recompute_enter(m, frame), 0);
  EXPECT_EQ(fp8audit_model_take_violations(m), 1u);  // the refused recompute only
}

TEST(ModelCApi, RecomputeOfAnUnknownFrameIsRefusedAndReported) {
  Model x;
  EXPECT_EQ(fp8audit_model_recompute_enter(x.m, 42), 0);
  ASSERT_EQ(fp8audit_model_take_violations(x.m), 1u);
  EXPECT_NE(std::string(fp8audit_model_violation(x.m, 0)).find("frame 42"), std::string::npos);
  EXPECT_EQ(fp8audit_model_take_violations(x.m), 0u);
}

TEST(ModelCApi, ScenariosRunAndConvertToJson) {
  uint64_t counts[8] = {};
  char err[256] = {};
  const std::string path = kScenarios + "reentrant_per_layer.textproto";
  ASSERT_EQ(fp8audit_run_scenario(path.c_str(), "te-2.20", 2, counts, 4, err, sizeof err), 2)
      << err;
  EXPECT_EQ(counts[0], 4u);
  EXPECT_EQ(counts[1], 3u);
  EXPECT_EQ(fp8audit_run_scenario(path.c_str(), "bogus", 2, counts, 4, err, sizeof err), -1);
  EXPECT_EQ(fp8audit_run_scenario("/no/such.textproto", "fixed", 0, counts, 4, err, sizeof err),
            -1);
  EXPECT_NE(std::string(err).find("/no/such.textproto"), std::string::npos);
  std::vector<char> json(1 << 16);
  const long n = fp8audit_scenario_json(path.c_str(), json.data(), json.size());
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(json.data()).find("\"checkpoint\""), std::string::npos);
  char small[8];
  EXPECT_EQ(fp8audit_scenario_json(path.c_str(), small, sizeof small), n);  // length, truncated
  EXPECT_EQ(std::string(small).size(), 7u);
}

}  // namespace
