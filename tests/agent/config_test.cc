#include "agent/src/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "agent/src/cuda_driver_facts.h"
#include "agent/src/writer.h"

namespace fp8audit::agent {
namespace {

Config Read(const std::map<std::string, std::string>& env, std::vector<std::string>* warnings,
            const std::string& cwd = "/home/job") {
  return ReadConfig(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      cwd, warnings);
}

TEST(AgentConfig, DefaultsWithEmptyEnvironment) {
  std::vector<std::string> w;
  const Config c = Read({}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_FALSE(c.disabled);
  EXPECT_EQ(c.out_dir, "/home/job/fp8audit-traces");
  EXPECT_EQ(c.expect_forward, 1u);
  EXPECT_EQ(c.expect_backward, 1u);
  EXPECT_FALSE(c.expect_forward_given);
  EXPECT_FALSE(c.expect_backward_given);
  EXPECT_FALSE(c.fail_fast);
  EXPECT_FALSE(c.self_profile);
  EXPECT_EQ(c.microbatch_range, "fp8audit.microbatch");
  EXPECT_EQ(c.step_mark, "fp8audit.step");
  EXPECT_FALSE(c.markers_configured);
  EXPECT_EQ(c.rank, -1);
  EXPECT_EQ(c.format, FormatHint::kAuto);
  EXPECT_EQ(c.on_full, OnFull::kWait);
}

TEST(AgentConfig, ReadsEveryVariable) {
  std::vector<std::string> w;
  const Config c = Read({{"FP8AUDIT_OUT", "/tmp/t"},
                         {"FP8AUDIT_EXPECT_FORWARD", "2"},
                         {"FP8AUDIT_EXPECT_BACKWARD", "0"},
                         {"FP8AUDIT_FAIL_FAST", "1"},
                         {"FP8AUDIT_SELF_PROFILE", "1"},
                         {"FP8AUDIT_PATTERNS", "p.txt"},
                         {"FP8AUDIT_MICROBATCH_RANGE", "mb"},
                         {"FP8AUDIT_STEP_MARK", "st"},
                         {"FP8AUDIT_FP8_FORMAT", "e4m3"},
                         {"FP8AUDIT_ON_FULL", "drop"},
                         {"LOCAL_RANK", "5"},
                         {"SLURM_PROCID", "9"}},
                        &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.out_dir, "/tmp/t");
  EXPECT_EQ(c.expect_forward, 2u);
  EXPECT_EQ(c.expect_backward, 0u);
  EXPECT_TRUE(c.expect_forward_given);
  EXPECT_TRUE(c.expect_backward_given);
  EXPECT_TRUE(c.fail_fast);
  EXPECT_TRUE(c.self_profile);
  EXPECT_EQ(c.patterns_path, "/home/job/p.txt");
  EXPECT_EQ(c.microbatch_range, "mb");
  EXPECT_TRUE(c.markers_configured);
  EXPECT_EQ(c.step_mark, "st");
  EXPECT_EQ(c.format, FormatHint::kE4M3);
  EXPECT_EQ(c.on_full, OnFull::kDrop);
  EXPECT_EQ(c.rank, 5);  // LOCAL_RANK before SLURM_PROCID
}

TEST(AgentConfig, RankPrefersRank) {
  std::vector<std::string> w;
  EXPECT_EQ(Read({{"RANK", "3"}, {"LOCAL_RANK", "1"}}, &w).rank, 3);
}

TEST(AgentConfig, BadValuesWarnOnceEachAndFallBack) {
  std::vector<std::string> w;
  const Config c = Read({{"FP8AUDIT_EXPECT_FORWARD", "one"},
                         {"FP8AUDIT_EXPECT_BACKWARD", "99999999999"},
                         {"FP8AUDIT_FAIL_FAST", "maybe"},
                         {"FP8AUDIT_SELF_PROFILE", "lots"},
                         {"FP8AUDIT_OUT", ""},
                         {"FP8AUDIT_MICROBATCH_RANGE", ""},
                         {"FP8AUDIT_FP8_FORMAT", "e5m2"},
                         {"FP8AUDIT_ON_FULL", "block"},
                         {"RANK", "-1"}},
                        &w);
  EXPECT_EQ(w.size(), 9u);
  for (const auto& line : w) EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(c.expect_forward, 1u);
  EXPECT_EQ(c.expect_backward, 1u);
  EXPECT_FALSE(c.fail_fast);
  EXPECT_FALSE(c.self_profile);
  EXPECT_EQ(c.out_dir, "/home/job/fp8audit-traces");
  EXPECT_EQ(c.microbatch_range, "fp8audit.microbatch");
  EXPECT_FALSE(c.markers_configured);
  EXPECT_EQ(c.format, FormatHint::kAuto);
  EXPECT_EQ(c.on_full, OnFull::kWait);
  EXPECT_EQ(c.rank, -1);
  EXPECT_NE(w[0].find("FP8AUDIT_"), std::string::npos);
}

TEST(AgentConfig, DisableStepsAsideBeforeAnythingElse) {
  std::vector<std::string> w;
  const Config c = Read({{"FP8AUDIT_DISABLE", "1"}, {"FP8AUDIT_EXPECT_FORWARD", "bad"}}, &w);
  EXPECT_TRUE(c.disabled);
  EXPECT_TRUE(w.empty());
}

TEST(AgentConfig, ControlCharactersInValuesAreNeutralised) {
  std::vector<std::string> w;
  Read({{"FP8AUDIT_EXPECT_FORWARD", "1\n2"}}, &w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].find('\n'), std::string::npos);
}

TEST(AgentConfig, RunIdGoesIntoTheHeaderAndABadOneIsIgnoredWithOneLine) {
  std::vector<std::string> w;
  const Config c = Read({{"FP8AUDIT_RUN_ID", "host-12.3_x"}}, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.run_id, "host-12.3_x");
  EXPECT_EQ(MakeTraceHeader(c, "h", 1, 0, {"x"}, CudaFacts{}).run_id(), "host-12.3_x");
  for (const std::string& bad :
       std::vector<std::string>{"", "a b", "a/b", std::string(65, 'x'), "\x1b]"}) {
    w.clear();
    EXPECT_EQ(Read({{"FP8AUDIT_RUN_ID", bad}}, &w).run_id, "") << bad;
    EXPECT_EQ(w.size(), 1u) << bad;
  }
  w.clear();
  EXPECT_EQ(Read({}, &w).run_id, "");
  EXPECT_TRUE(w.empty());
}

TEST(AgentConfig, ReadsTheDriverReleaseOfEitherKernelModule) {
  EXPECT_EQ(ParseNvidiaDriverRelease("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                     "580.159.04  Release Build  (dvs-builder@U22)  Thu Jul\n"
                                     "GCC version:  gcc version 12.3.0\n"),
            "580.159.04");
  EXPECT_EQ(ParseNvidiaDriverRelease("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  "
                                     "Sat Aug 19 01:15:15 UTC 2023\n"),
            "535.104.05");
  EXPECT_EQ(ParseNvidiaDriverRelease("garbage"), "");
  EXPECT_EQ(ParseNvidiaDriverRelease("Kernel Module for x86_64\n580.1"), "");
}

}  // namespace
}  // namespace fp8audit::agent
