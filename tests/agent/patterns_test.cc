#include "fp8audit/patterns.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>

namespace fp8audit::agent {
namespace {

// Demangled names of Transformer Engine's DelayedScaling update kernels, as the agent sees them.
constexpr char kTeBulk[] =
    "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::amax_and_scale_update_impl"
    "::kernel_bulk(float*, transformer_engine::delayed_scaling_recipe::(anonymous namespace)::"
    "AmaxParams, unsigned long, transformer_engine::delayed_scaling_recipe::(anonymous namespace)::"
    "AmaxComputeAlgo, float)";
constexpr char kTeKernel[] =
    "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::amax_and_scale_update_impl"
    "::kernel(float const*, float const*, float*, float*, unsigned long, unsigned long, "
    "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::AmaxComputeAlgo, float)";

bool Parse(const std::string& text, std::vector<PatternRule>* rules, std::string* error) {
  return ParsePatterns(text, "p.txt", rules, error);
}

TEST(AgentPatterns, ParsesRulesCommentsAndBlankLines) {
  std::vector<PatternRule> rules;
  std::string error;
  ASSERT_TRUE(
      Parse("# comment\n\n  update.forward  prefix  ns::fwd \r\n"
            "update.backward contains bwd kernel\n"
            "update regex ^a(b|c)+d\\(\n"
            "\tnone contains debug\n",
            &rules, &error))
      << error;
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].event, RuleEvent::kUpdateForward);
  EXPECT_EQ(rules[0].match, MatchKind::kPrefix);
  EXPECT_EQ(rules[0].pattern, "ns::fwd");
  EXPECT_EQ(rules[0].origin, "p.txt:3");
  EXPECT_EQ(rules[1].pattern, "bwd kernel");  // the rest of the line, spaces inside kept
  EXPECT_EQ(rules[2].match, MatchKind::kRegex);
  EXPECT_EQ(rules[3].event, RuleEvent::kNone);
  EXPECT_TRUE(rules[0].Matches("ns::fwd_update(int)"));
  EXPECT_FALSE(rules[0].Matches("x::ns::fwd_update(int)"));
  EXPECT_TRUE(rules[1].Matches("void my bwd kernel(int)"));
  EXPECT_TRUE(rules[2].Matches("abcbd(float)"));
  EXPECT_FALSE(rules[2].Matches("ad(float)"));
  EXPECT_FALSE(rules[2].Matches("xabcd(float)"));  // ^ still anchors
  std::vector<PatternRule> more;
  ASSERT_TRUE(Parse("update regex kern|bulk$\n", &more, &error)) << error;
  EXPECT_TRUE(more[0].Matches("x kern y"));  // found anywhere
  EXPECT_TRUE(more[0].Matches("the bulk"));
  EXPECT_FALSE(more[0].Matches("the bulk()"));  // $ still anchors
}

TEST(AgentPatterns, ErrorsNameFileAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"update.sideways contains x\n", "p.txt:1: unknown event 'update.sideways'"},
      {"# ok\nupdate\n", "p.txt:2: missing match kind"},
      {"update like x\n", "p.txt:1: unknown match kind 'like'"},
      {"update contains   \n", "p.txt:1: missing pattern"},
      {"update regex [abc\n", "p.txt:1: unterminated '['"},
      {"update regex a{3}\n", "p.txt:1: counted repetition"},
      {"update regex (a)\\1\n", "p.txt:1: back-references"},
      {"update regex ((((((((((a))))))))))\n", "p.txt:1: groups nested deeper than 8"},
      {"update regex a)\n", "p.txt:1: unbalanced ')'"},
      {"update regex (a*)*b\n", "p.txt:1: nested repetition"},
      {"update regex (\\w+::)+x\n", "p.txt:1: nested repetition"},
      {"update regex ((a+)b)*\n", "p.txt:1: nested repetition"},
      {"update regex " + std::string(300, 'a') + "\n", "p.txt:1: regex longer than 256"},
      {"update contains " + std::string(2000, 'a') + "\n", "p.txt:1: line longer than 1024"},
      {std::string("update contains a\0b\n", 20), "p.txt:1: contains a NUL byte"},
  };
  for (const auto& [text, want] : cases) {
    std::vector<PatternRule> rules;
    std::string error;
    EXPECT_FALSE(Parse(text, &rules, &error)) << text;
    EXPECT_EQ(error.rfind(want, 0), 0u) << "got: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos);
    EXPECT_TRUE(rules.empty());
  }
}

TEST(AgentPatterns, RejectsOversizeInputAndTooManyRules) {
  std::vector<PatternRule> rules;
  std::string error;
  EXPECT_FALSE(Parse(std::string(kMaxPatternFileBytes + 1, '#'), &rules, &error));
  EXPECT_EQ(error, "p.txt: larger than 65536 bytes");
  std::string many;
  for (size_t i = 0; i <= kMaxPatternRules; ++i)
    many += "update contains k" + std::to_string(i) + "\n";
  EXPECT_FALSE(Parse(many, &rules, &error));
  EXPECT_EQ(error, "p.txt:257: more than 256 rules");
}

TEST(AgentPatterns, LoadsFilesAndReportsUnreadableOnes) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / "fp8audit-patterns-test.txt").string();
  std::ofstream(path) << "update.forward contains fwd\nbogus contains x\n";
  std::vector<PatternRule> rules;
  std::string error;
  EXPECT_FALSE(LoadPatternFile(path, &rules, &error));
  EXPECT_EQ(error, path +
                       ":2: unknown event 'bogus' (expected update.forward, update.backward, "
                       "update or none)");
  EXPECT_FALSE(LoadPatternFile(path + ".missing", &rules, &error));
  EXPECT_EQ(error, path + ".missing: No such file or directory");
  EXPECT_FALSE(LoadPatternFile(dir.string(), &rules, &error));
  EXPECT_EQ(error, dir.string() + ": not a regular file (a directory)");
  std::filesystem::remove(path);
}

TEST(AgentPatterns, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = (std::filesystem::temp_directory_path() /
                            ("fp8audit-patterns-" + std::to_string(::getpid()) + ".fifo"))
                               .string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::vector<PatternRule> rules;
  std::string error;
  auto load = std::async(std::launch::async, [&] { return LoadPatternFile(fifo, &rules, &error); });
  if (load.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    // Blocked in open(): a writer releases it, so that the test can end.
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
    load.wait();
    std::filesystem::remove(fifo);
    FAIL() << "LoadPatternFile blocked on a FIFO";
  }
  EXPECT_FALSE(load.get());
  EXPECT_EQ(error, fifo + ": not a regular file (a FIFO)");
  std::filesystem::remove(fifo);
}

TEST(AgentPatterns, BuiltinsMatchTransformerEngineUpdateKernels) {
  for (const PatternRule& r : BuiltinRules()) EXPECT_NE(r.regex, nullptr) << r.pattern;
  const Classifier c;
  const PatternRule* bulk = c.Match(kTeBulk);
  ASSERT_NE(bulk, nullptr);
  EXPECT_EQ(bulk->event, RuleEvent::kUpdate);
  EXPECT_EQ(bulk->scaled_max_param, 4);
  const PatternRule* kernel = c.Match(kTeKernel);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->scaled_max_param, 7);
  EXPECT_TRUE(ParameterIsFloat(kTeBulk, 4));
  EXPECT_TRUE(ParameterIsFloat(kTeKernel, 7));
  EXPECT_FALSE(ParameterIsFloat(kTeBulk, 3));
  EXPECT_FALSE(ParameterIsFloat(kTeBulk, 5));
  EXPECT_EQ(c.Match("transformer_engine::delayed_scaling_recipe::other_kernel(float)"), nullptr);
  EXPECT_EQ(c.Match("void at::native::vectorized_elementwise_kernel<4>(int)"), nullptr);
  EXPECT_NE(c.Match("void fp8audit::kernels::detail::DelayedScalingUpdateKernel<float>(float*)"),
            nullptr);
  constexpr char kOurs[] =
      "fp8audit::kernels::cuda::(anonymous namespace)::delayed_scaling_update_kernel(float*, long, "
      "long, float*, float*, float, int, fp8audit::kernels::AmaxAlgo)";
  ASSERT_NE(c.Match(kOurs), nullptr);
  EXPECT_EQ(c.Match(kOurs)->scaled_max_param, 5);
  EXPECT_TRUE(ParameterIsFloat(kOurs, 5));
  EXPECT_EQ(c.Match("void fp8audit::kernels::detail::CastTransposeKernel<float>(float*)"), nullptr);
}

TEST(AgentPatterns, UserRulesComeFirstAndNoneExcludes) {
  std::vector<PatternRule> rules;
  std::string error;
  ASSERT_TRUE(
      Parse("none contains kernel_bulk\nupdate.backward contains my_update\n", &rules, &error));
  const Classifier c(std::move(rules));
  EXPECT_EQ(c.user_rules(), 2u);
  ASSERT_NE(c.Match(kTeBulk), nullptr);
  EXPECT_EQ(c.Match(kTeBulk)->event, RuleEvent::kNone);
  EXPECT_EQ(c.Match(kTeKernel)->event, RuleEvent::kUpdate);
  EXPECT_EQ(c.Match("my_update(int)")->event, RuleEvent::kUpdateBackward);
}

TEST(AgentPatterns, RegexMatchingStaysPolynomialOnLongNames) {
  std::vector<PatternRule> rules;
  std::string error;
  ASSERT_TRUE(Parse("update regex (a|aa)+b\nupdate regex .*.*.*.*x\nupdate regex (.*::)?y\\(\n",
                    &rules, &error))
      << error;
  const std::string name(kMaxMatchedName, 'a');
  for (const PatternRule& r : rules) EXPECT_FALSE(r.Matches(name));  // returns, and quickly
  EXPECT_TRUE(rules[0].Matches(std::string(1000, 'a') + "b"));
  EXPECT_TRUE(rules[1].Matches("x"));
  EXPECT_TRUE(rules[2].Matches("a::b::y(int)"));
  EXPECT_FALSE(rules[2].Matches("a::b::z(int)"));
}

TEST(AgentPatterns, ScaledMaxNamesTheFormat) {
  EXPECT_EQ(ClassifyScaledMax(448.0f), ScaledMax::kE4M3);
  EXPECT_EQ(ClassifyScaledMax(224.0f), ScaledMax::kE4M3);  // margin 1
  EXPECT_EQ(ClassifyScaledMax(std::ldexp(448.0f, -20)), ScaledMax::kE4M3);
  EXPECT_EQ(ClassifyScaledMax(57344.0f), ScaledMax::kE5M2);
  EXPECT_EQ(ClassifyScaledMax(57344.0f / 64), ScaledMax::kE5M2);   // margin 6
  EXPECT_EQ(ClassifyScaledMax(57344.0f / 128), ScaledMax::kE4M3);  // == 448
  EXPECT_EQ(ClassifyScaledMax(1.0f), ScaledMax::kOther);
  EXPECT_EQ(ClassifyScaledMax(448.5f), ScaledMax::kOther);
  EXPECT_EQ(ClassifyScaledMax(0.0f), ScaledMax::kOther);
  EXPECT_EQ(ClassifyScaledMax(-448.0f), ScaledMax::kOther);
  EXPECT_EQ(ClassifyScaledMax(NAN), ScaledMax::kOther);
  EXPECT_EQ(ClassifyScaledMax(INFINITY), ScaledMax::kOther);
}

TEST(AgentPatterns, DemanglesAndKeepsPlainNames) {
  EXPECT_EQ(Demangle("_ZN2ns6kernelEPff"), "ns::kernel(float*, float)");
  EXPECT_EQ(Demangle("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(Demangle(nullptr), "");
  EXPECT_FALSE(ParameterIsFloat("no_parens", 0));
  EXPECT_FALSE(ParameterIsFloat("f(float)", -1));
  EXPECT_TRUE(ParameterIsFloat("f(float)", 0));
  EXPECT_TRUE(ParameterIsFloat("f(std::pair<int, int>, float)", 1));
  EXPECT_FALSE(ParameterIsFloat("f(std::pair<int, int>, float)", 2));
}

}  // namespace
}  // namespace fp8audit::agent
