// state::Predict and state::RenderModel: `fp8audit model` as one call and its renderings.
#include "state/predict.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace fp8audit::state {
namespace {

const std::string kDir = std::string(FP8AUDIT_SOURCE_DIR) + "/state/scenarios/";

ModelRequest Decoder28x7(Semantics semantics) {
  ModelRequest request;
  request.layout.layers = 28;
  request.layout.linears_per_layer = 7;
  request.layout.checkpoint = CheckpointKind::kReentrant;
  request.layout.segments = Segments::kPerLayer;
  request.semantics = semantics;
  request.microbatches = 2;
  return request;
}

TEST(Predict, RunsALayoutUnderTheRequestedSemantics) {
  std::string error;
  const auto legacy = Predict(Decoder28x7(Semantics::kTeLegacy), &error);
  ASSERT_TRUE(legacy && legacy->prediction) << error;
  const v1::ModelResult& r = legacy->prediction->result;
  EXPECT_EQ(r.semantics(), "te-172bd93");
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(1).forward_updates(), 29u);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 196u);
  EXPECT_EQ(r.microbatches(1).explanations_size(), 28 + 195);
  EXPECT_FALSE(legacy->passed());

  const auto fixed = Predict(Decoder28x7(Semantics::kFixed), &error);
  ASSERT_TRUE(fixed && fixed->prediction) << error;
  EXPECT_EQ(fixed->prediction->result.microbatches(0).forward_updates(), 1u);
  EXPECT_TRUE(fixed->passed());
}

TEST(Predict, ComparesEveryInputUnderEveryRegisteredSemantics) {
  ModelRequest request;
  request.compare = true;
  request.scenarios = {kDir + "reentrant_single.textproto", kDir + "no_checkpoint.textproto"};
  std::string error;
  const auto report = Predict(request, &error);
  ASSERT_TRUE(report) << error;
  EXPECT_FALSE(report->prediction);
  ASSERT_EQ(report->rows.size(), 2u);
  const CompareRow& row = report->rows[0];
  ASSERT_EQ(row.columns.size(), AllSemantics().size());  // every registered one, fixed last
  for (Semantics s : {Semantics::kTeLegacy, Semantics::kTe220}) {
    const CompareColumn* c = row.of(s);
    ASSERT_TRUE(c && !c->microbatches.empty()) << SemanticsName(s);
    EXPECT_EQ(c->microbatches[0].forward, 2u);
    EXPECT_EQ(c->microbatches[0].backward, 3u);
    EXPECT_FALSE(c->passed);
  }
  EXPECT_EQ(row.fixed().semantics, Semantics::kFixed);
  EXPECT_EQ(row.fixed().microbatches[0].forward, 1u);
  EXPECT_TRUE(row.fixed().passed);
  EXPECT_TRUE(report->passed());  // judged on the fixed column

  std::string table;
  ASSERT_TRUE(RenderModel(*report, ModelFormat::kText, 20, &table));
  EXPECT_EQ(table.rfind("scenario", 0), 0u) << table;
  EXPECT_NE(table.find("2/3"), std::string::npos) << table;
  const std::string rows = table.substr(0, table.find("\n\n") + 1);  // then the legend
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 3) << table;
  EXPECT_NE(table.find("\nF/B: forward/backward updates per microbatch"), std::string::npos);
}

// Columns as wide as their widest cell: the verdict column lines up under a long scenario name,
// and a fixed FAIL where the scenario's job raises is explained under the table.
TEST(Predict, CompareTableKeepsItsColumnsAndExplainsAFixedFail) {
  ModelRequest request;
  request.compare = true;
  request.scenarios = {kDir + "inner_autocast_disabled_outer_reentrant.textproto",
                       kDir + "recompute_body_failure.textproto", kDir + "no_checkpoint.textproto"};
  std::string error;
  const auto report = Predict(request, &error);
  ASSERT_TRUE(report) << error;
  std::string table;
  ASSERT_TRUE(RenderModel(*report, ModelFormat::kText, 20, &table));
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = table.find('\n', at)) != std::string::npos; at = end + 1) {
    lines.push_back(table.substr(at, end - at));
  }
  ASSERT_GE(lines.size(), 6u) << table;
  const size_t verdict = lines[0].find("fixed verdict");
  ASSERT_NE(verdict, std::string::npos) << table;
  const size_t counts = lines[0].find(SemanticsName(report->rows[0].columns[0].semantics));
  ASSERT_GT(counts, std::string("scenario").size()) << table;
  for (size_t i = 1; i <= 3; ++i) {
    ASSERT_GT(lines[i].size(), verdict) << table;
    EXPECT_TRUE(lines[i].compare(verdict, 4, "PASS") == 0 ||
                lines[i].compare(verdict, 4, "FAIL") == 0)
        << lines[i];
    EXPECT_EQ(lines[i][counts - 1], ' ') << lines[i];  // the counts start under their header
    EXPECT_NE(lines[i][counts], ' ') << lines[i];
  }
  EXPECT_EQ(lines[2].substr(verdict), "FAIL") << table;
  EXPECT_NE(table.find("FAIL under fixed in \"recompute body failure"), std::string::npos) << table;
  EXPECT_NE(table.find("as intended; every other microbatch is 1/1."), std::string::npos) << table;
}

TEST(Predict, CompareCallsAMissingBackwardUpdateIntendedOnlyWhereTheJobRaised) {
  // No module has a backward node (frozen, its input needs no grad): 1/0 with nothing raised is
  // the fixed ownership's own failure, never "the job raises there ... as intended".
  const std::string path = ::testing::TempDir() + "frozen_only.textproto";
  {
    std::ofstream f(path);
    f << "schema_version: 1\nname: \"frozen only\"\nmodules { name: \"a\" frozen: true }\n"
         "input_no_grad: true\nmicrobatches: 2\n"
         "program { autocast { body { call { module: \"a\" } } } }\n";
  }
  ModelRequest request;
  request.compare = true;
  request.scenarios = {path};
  std::string error;
  const auto report = Predict(request, &error);
  ASSERT_TRUE(report) << error;
  std::string table;
  ASSERT_TRUE(RenderModel(*report, ModelFormat::kText, 20, &table));
  EXPECT_NE(table.find("FAIL under fixed in \"frozen only\": the fixed ownership does not give "
                       "1/1 there"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("as intended"), std::string::npos) << table;
  std::remove(path.c_str());
}

TEST(Predict, RefusesBadInputWithOneLine) {
  ModelRequest request;
  request.scenarios = {kDir + "reentrant_single.textproto", kDir + "no_checkpoint.textproto"};
  std::string error;
  EXPECT_FALSE(Predict(request, &error));
  EXPECT_EQ(error, "several scenarios need --compare");
  request.scenarios = {"/nonexistent.textproto"};
  EXPECT_FALSE(Predict(request, &error));
  EXPECT_EQ(error, "/nonexistent.textproto: cannot open the scenario file");
}

TEST(RenderModel, TextCapsTheExplanationsOfTheFirstFailingMicrobatch) {
  std::string error;
  const auto report = Predict(Decoder28x7(Semantics::kTeLegacy), &error);
  ASSERT_TRUE(report) << error;
  std::string text;
  ASSERT_TRUE(RenderModel(*report, ModelFormat::kText, 2, &text));
  EXPECT_NE(text.find("why (microbatch 0):"), std::string::npos) << text;
  EXPECT_NE(text.find("  ... and 221 more (--format json lists them all)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: FAIL (2 of 2 microbatches differ from 1/1)"), std::string::npos)
      << text;
}

TEST(RenderModel, JsonIsTheModelResult) {
  std::string error;
  const auto report = Predict(Decoder28x7(Semantics::kTeLegacy), &error);
  ASSERT_TRUE(report) << error;
  std::string json;
  ASSERT_TRUE(RenderModel(*report, ModelFormat::kJson, 2, &json));
  v1::ModelResult parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  EXPECT_EQ(parsed.SerializeAsString(), report->prediction->result.SerializeAsString());
}

}  // namespace
}  // namespace fp8audit::state
