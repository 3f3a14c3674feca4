// `fp8audit model` end to end: output shapes and documented exit codes.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fp8audit/report.pb.h"
#include "proto/trace_io.h"

namespace fp8audit {
namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunCli(const std::string& args) {
  const std::string err_path =
      (std::filesystem::temp_directory_path() / ("fp8audit_model_err." + std::to_string(getpid())))
          .string();
  const std::string cmd =
      std::string(FP8AUDIT_BINARY_DIR) + "/bin/fp8audit " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

const std::string kScenarios = std::string(FP8AUDIT_SOURCE_DIR) + "/state/scenarios/";

TEST(ModelCommand, LayoutJsonHasSemanticsAndPerMicrobatchCounts) {
  const Result r = RunCli(
      "model --layers 28 --linears-per-layer 7 --checkpoint reentrant --segments per-layer "
      "--semantics te-legacy --microbatches 2 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  v1::ModelResult result;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &result).ok()) << r.out;
  EXPECT_EQ(result.semantics(), "te-legacy");
  ASSERT_EQ(result.microbatches_size(), 2);
  EXPECT_EQ(result.microbatches(0).forward_updates(), 29u);
  EXPECT_EQ(result.microbatches(0).backward_updates(), 196u);
  EXPECT_EQ(result.microbatches(0).explanations_size(), 28 + 195);
  EXPECT_NE(r.out.find("\"forward_updates\": 29"), std::string::npos);
}

TEST(ModelCommand, FixedSemanticsIsOneAndOne) {
  const Result r =
      RunCli("model --layers 4 --checkpoint non-reentrant --segments nested --format json --check");
  ASSERT_EQ(r.code, 0) << r.err;
  v1::ModelResult result;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &result).ok());
  EXPECT_EQ(result.semantics(), "fixed");
  EXPECT_EQ(result.microbatches(0).forward_updates(), 1u);
  EXPECT_EQ(result.microbatches(0).backward_updates(), 1u);
  EXPECT_EQ(result.verdict(), v1::PASS);
}

TEST(ModelCommand, CheckExits3WhenCountsDifferFromExpectation) {
  const Result r =
      RunCli("model " + kScenarios + "reentrant_per_layer.textproto --semantics te-legacy --check");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("verdict: FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute of checkpoint frame"), std::string::npos) << r.out;
}

TEST(ModelCommand, MalformedScenarioExits2WithOneLineNamingFileLineColumn) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fp8audit_bad.textproto").string();
  std::ofstream(path) << "modules { name: \"a\" }\nprogram { autocast { bdy {} } }\n";
  const Result r = RunCli("model " + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":2:"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::filesystem::remove(path);
}

TEST(ModelCommand, UnknownFlagOrValueExits2WithUsage) {
  Result r = RunCli("model --layers 3 --checkpoint sometimes");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("Usage:"), std::string::npos) << r.err;
  r = RunCli("model --layers 3 --no-such-flag");
  EXPECT_EQ(r.code, 2);
  r = RunCli("model");
  EXPECT_EQ(r.code, 2);
  r = RunCli("model --checkpoint reentrant " + kScenarios + "no_checkpoint.textproto");
  EXPECT_EQ(r.code, 2);  // layout flags need --layers
}

TEST(ModelCommand, TraceOutWritesTheModelEventsAsAReadableTrace) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fp8audit_model.fp8trace").string();
  const Result r = RunCli("model " + kScenarios +
                          "reentrant_single.textproto --semantics te-legacy --trace-out " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_TRUE(reader) << error;
  v1::TraceRecord rec;
  int fwd = 0, bwd = 0, records = 0;
  while (reader->Next(&rec) == TraceFileReader::Status::kRecord) {
    ++records;
    if (rec.has_event() && rec.event().kind() == v1::UPDATE_FORWARD) ++fwd;
    if (rec.has_event() && rec.event().kind() == v1::UPDATE_BACKWARD) ++bwd;
  }
  EXPECT_EQ(reader->Next(&rec), TraceFileReader::Status::kEnd);
  EXPECT_EQ(fwd, 3 * 2);  // 3 microbatches
  EXPECT_EQ(bwd, 3 * 3);
  EXPECT_GT(records, 2);
  std::filesystem::remove(path);
}

TEST(ModelCommand, CompareTabulatesTeLegacyAndFixedPerScenario) {
  const Result r = RunCli("model --compare --check " + kScenarios + "reentrant_single.textproto " +
                          kScenarios + "no_checkpoint.textproto");
  EXPECT_EQ(r.code, 0) << r.err;  // --check judges the fixed column
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  EXPECT_EQ(r.out.rfind("scenario", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("te-legacy fwd/bwd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 2/3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(ModelCommand, SeveralScenariosWithoutCompareExit2) {
  const Result r = RunCli("model " + kScenarios + "reentrant_single.textproto " + kScenarios +
                          "no_checkpoint.textproto");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "fp8audit model: several scenarios need --compare\n");
}

}  // namespace
}  // namespace fp8audit
