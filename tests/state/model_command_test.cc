// `fp8audit model` end to end: output shapes and documented exit codes.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "fp8audit/report.pb.h"
#include "proto/trace_io.h"
#include "state/scenario.h"

namespace fp8audit {
namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

// `prefix` runs before the command in the same shell (limits).
Result RunCli(const std::string& args, const std::string& prefix = "") {
  const std::string err_path =
      (std::filesystem::temp_directory_path() / ("fp8audit_model_err." + std::to_string(getpid())))
          .string();
  const std::string cmd =
      prefix + std::string(FP8AUDIT_BINARY_DIR) + "/bin/fp8audit " + args + " 2>" + err_path;
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
  EXPECT_EQ(result.semantics(), "te-172bd93");  // "te-legacy" is its alias
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

TEST(ModelCommand, UnknownFlagOrValueExits2WithOneLineAndAHint) {
  Result r = RunCli("model --layers 3 --checkpoint sometimes");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("fp8audit model: --checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(see 'fp8audit model --help')"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Usage:"), std::string::npos) << r.err;  // not the whole help
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
  const std::string rows = r.out.substr(0, r.out.find("\n\n") + 1);  // the legend follows
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 3) << r.out;
  EXPECT_EQ(r.out.rfind("scenario", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("te-172bd93 fwd/bwd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 2/3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

// Every TE release the model knows is a --semantics name; an unknown one is a usage error.
TEST(ModelCommand, SemanticsAcceptsEveryTeReleaseByName) {
  for (const std::string name : {"fixed", "te-2.20", "te-172bd93", "te-legacy"}) {
    const Result r = RunCli("model " + kScenarios +
                            "reentrant_single.textproto --format json --semantics " + name);
    EXPECT_EQ(r.code, 0) << name << ": " << r.err;
  }
  const Result bad =
      RunCli("model " + kScenarios + "reentrant_single.textproto --semantics te-9.9");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("te-2.20"), std::string::npos) << bad.err;
}

// te-3456 (TE's PR #3456, no release) is chosen by name: one backward update per backward() call.
TEST(ModelCommand, Te3456RunsAScenarioByNameAndAlias) {
  for (const std::string name : {"te-3456", "te-pr-3456"}) {
    const Result r = RunCli("model " + kScenarios +
                            "reentrant_per_layer.textproto --format json --semantics " + name);
    ASSERT_EQ(r.code, 0) << name << ": " << r.err;
    v1::ModelResult result;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &result).ok()) << r.out;
    EXPECT_EQ(result.semantics(), "te-3456");
    ASSERT_GT(result.microbatches_size(), 0);
    EXPECT_EQ(result.microbatches(0).backward_updates(), 1u);
  }
}

// The comparison shows both TE releases beside the fixed semantics: they differ on eval modules.
TEST(ModelCommand, CompareShowsEachTeReleaseBesideFixed) {
  const Result r = RunCli("model --compare " + kScenarios + "eval_modules_reentrant.textproto");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("te-172bd93 fwd/bwd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("te-2.20 fwd/bwd"), std::string::npos) << r.out;
}

TEST(ModelCommand, SeveralScenariosWithoutCompareExit2) {
  const Result r = RunCli("model " + kScenarios + "reentrant_single.textproto " + kScenarios +
                          "no_checkpoint.textproto");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "fp8audit model: several scenarios need --compare\n");
}

// --compare runs every semantics and prints a text table: a flag that applies to one semantics'
// run (the trace of its events, its JSON, the semantics itself, its explanations) is refused
// before anything is run or written, with the parser's line and hint, never ignored with exit 0.
void ExpectCompareRefuses(const Result& r, const std::string& flag) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err,
            "fp8audit model: --compare excludes " + flag + " (see 'fp8audit model --help')\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ModelCommand, CompareWithTraceOutExits2AndLeavesTheFileAsItWas) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("fp8audit_compare_trace." + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  const std::string path = (dir / "t.fp8trace").string();
  std::ofstream(path) << "an earlier trace";
  const Result r =
      RunCli("model --compare " + kScenarios + "reentrant_single.textproto --trace-out " + path);
  ExpectCompareRefuses(r, "--trace-out");
  std::ifstream in(path);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), "an earlier trace");
  // Nothing else was left beside it (no temporary file).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  // The layout too.
  ExpectCompareRefuses(RunCli("model --compare --layers 2 --trace-out " + path), "--trace-out");
  std::ifstream again(path);
  std::stringstream still;
  still << again.rdbuf();
  EXPECT_EQ(still.str(), "an earlier trace");
  std::filesystem::remove_all(dir);
}

TEST(ModelCommand, CompareWithFormatJsonExits2) {
  ExpectCompareRefuses(
      RunCli("model --compare --format json " + kScenarios + "reentrant_single.textproto"),
      "--format json");
  // Text, the table's own format, may be named.
  const Result text =
      RunCli("model --compare --format text " + kScenarios + "reentrant_single.textproto");
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out.rfind("scenario", 0), 0u) << text.out;
}

TEST(ModelCommand, CompareWithSemanticsExits2) {
  ExpectCompareRefuses(
      RunCli("model --compare --semantics te-2.20 " + kScenarios + "reentrant_single.textproto"),
      "--semantics");
}

TEST(ModelCommand, CompareWithMaxExplanationsExits2) {
  ExpectCompareRefuses(
      RunCli("model --compare --max-explanations 3 " + kScenarios + "reentrant_single.textproto"),
      "--max-explanations");
}

// --check with --compare judges each row's fixed verdict: exit 3 where one FAILs.
TEST(ModelCommand, CompareWithCheckExits3WhenAFixedVerdictFails) {
  const std::string failing = kScenarios + "recompute_body_failure.textproto";
  const Result checked = RunCli("model --compare --check " + failing);
  EXPECT_EQ(checked.code, 3) << checked.err;
  EXPECT_NE(checked.out.find("FAIL"), std::string::npos) << checked.out;
  const Result unchecked = RunCli("model --compare " + failing);
  EXPECT_EQ(unchecked.code, 0) << unchecked.err;
}

// --help says what --compare takes, and what it does not.
TEST(ModelCommand, HelpSaysWhatCompareExcludes) {
  const Result r = RunCli("model --help");
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.out.find("  --compare ");
  ASSERT_NE(at, std::string::npos) << r.out;
  // Its names and description, up to the next flag's.
  const std::string line = r.out.substr(at, r.out.find("\n  --", at) - at);
  for (const std::string flag : {"--semantics", "--trace-out", "--max-explanations"}) {
    EXPECT_NE(line.find("Excludes:"), std::string::npos) << line;
    EXPECT_NE(line.find(flag), std::string::npos) << flag << ": " << line;
  }
  EXPECT_NE(line.find("--format json"), std::string::npos) << line;
  EXPECT_NE(line.find("--check"), std::string::npos) << line;
}

// Hostile inputs run with 1 GiB of address space (not under AddressSanitizer, whose shadow memory
// needs more) and a generous wall-clock stop, so that unbounded growth or a hang fails the test
// instead of the machine.
Result RunBounded(const std::string& args) {
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit;
#else
  const std::string limit = "ulimit -v 1048576; ";
#endif
  return RunCli(args, limit + "exec timeout -s KILL 300 ");
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("fp8audit_" + std::to_string(getpid()) + "_" + name))
                               .string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

void ExpectOneLineExit2(const Result& r, const std::string& starts_with, const std::string& says) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("fp8audit model: " + starts_with, 0), 0u) << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

const std::string kOpLimit =
    "the limit of " + std::to_string(state::kMaxExpandedOps) + " ops executed";
const std::string kModule = "modules { name: \"a\" }\n";
const std::string kCallA = "call { module: \"a\" }";

TEST(ModelCommandLimits, DeeplyNestedScenarioExits2WithOneLine) {
  std::string program;
  for (int i = 0; i < 3500; ++i) program += "autocast { body { ";
  program += kCallA;
  for (int i = 0; i < 3500; ++i) program += " } }";
  const std::string path = WriteTemp("deep.textproto", kModule + "program { " + program + " }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path + ":2:", "nested more than 64 deep");
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, NestingJustPastTheLimitNamesTheLimit) {
  std::string program;
  for (int i = 0; i < 65; ++i) program += "repeat { count: 1 body { ";
  program += kCallA;
  for (int i = 0; i < 65; ++i) program += " } }";
  const std::string path = WriteTemp("deep65.textproto", kModule + "program { " + program + " }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path + ":2:", "nested more than 64 deep");
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, HugeMicrobatchCountExits2) {
  const std::string path =
      WriteTemp("mb.textproto", kModule + "microbatches: 4294967295\nprogram { autocast { body { " +
                                    kCallA + " } } }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path + ":2:", kOpLimit);
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, HugeRepeatCountExits2) {
  const std::string path =
      WriteTemp("repeat.textproto", kModule +
                                        "program { autocast { body {\n repeat { count: "
                                        "4294967295 body { " +
                                        kCallA + " } } } } }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path, kOpLimit);
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, NestedRepeatsWhoseProductWrapsExit2) {
  // 65536^4 = 2^64: a product kept in 64 bits without saturation would read 0.
  std::string program = kCallA;
  for (int i = 0; i < 4; ++i) program = "repeat { count: 65536 body { " + program + " } }";
  const std::string path = WriteTemp(
      "repeats.textproto", kModule + "program { autocast { body { " + program + " } } }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path, kOpLimit);
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, MicrobatchesFlagCountsAgainstTheLimit) {
  const std::string path = WriteTemp(
      "flag.textproto", kModule + "program { autocast { body { repeat { count: 100000 body { " +
                            kCallA + " } } } } }\n");
  EXPECT_EQ(RunBounded("model " + path + " --microbatches 1").code, 0);
  ExpectOneLineExit2(RunBounded("model " + path + " --microbatches 1000000"), path, kOpLimit);
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, HugeLayoutExits2BeforeBuildingIt) {
  ExpectOneLineExit2(RunBounded("model --layers 100000 --linears-per-layer 1000"), "<layout>",
                     kOpLimit);
}

TEST(ModelCommandLimits, DevZeroExits2) {
  ExpectOneLineExit2(RunBounded("model /dev/zero"), "/dev/zero:", "not a regular file");
}

TEST(ModelCommandLimits, FifoExits2WithoutWaitingForAWriter) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("fp8audit_" + std::to_string(getpid()) + "_fifo.textproto"))
                               .string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  ExpectOneLineExit2(RunBounded("model " + path), path + ":", "not a regular file");
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, OversizedScenarioFileExits2) {
  // A valid scenario padded with comments past the size limit.
  std::string text = kModule + "program { autocast { body { " + kCallA + " } } }\n";
  const std::string comment = "# " + std::string(1021, 'x') + "\n";
  while (text.size() <= (4u << 20)) text += comment;
  const std::string path = WriteTemp("big.textproto", text);
  ExpectOneLineExit2(RunBounded("model " + path), path + ":", "larger than");
  std::filesystem::remove(path);
}

TEST(ModelCommandLimits, UnknownEnumNumberExits2NamingIt) {
  const std::string path =
      WriteTemp("kind.textproto", "modules { name: \"a\" kind: 99 }\nprogram { autocast { body { " +
                                      kCallA + " } } }\n");
  ExpectOneLineExit2(RunBounded("model " + path), path + ":1:", "99");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace fp8audit
