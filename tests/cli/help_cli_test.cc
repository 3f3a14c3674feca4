// Every --help ends with examples (issue: what a user sees first): `fp8audit --help` and each
// command's, the commands found as the binary lists them. Each section's first example is run as
// a user would paste it, with a stand-in agent, stand-ins for the job's launchers on PATH and a
// trace directory where it reads one: it must parse and succeed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Passing;
using cli_testing::Result;
using testing::Contains;
namespace fs = std::filesystem;

class HelpCli : public CliTest {
 protected:
  // The commands, as the binary names them to a user who typed none of them.
  std::vector<std::string> Commands() {
    const Result r = Fp8audit({"frobnicate"});
    const std::string marker = "the commands are ";
    const size_t at = r.err.find(marker);
    EXPECT_NE(at, std::string::npos) << Describe(r);
    if (at == std::string::npos) return {};
    // The list runs to the hint that ends the line: " (see 'fp8audit --help')".
    const size_t end = r.err.find(" (see ", at);
    EXPECT_NE(end, std::string::npos) << Describe(r);
    std::istringstream list(r.err.substr(at + marker.size(), end - at - marker.size()));
    std::vector<std::string> commands;
    for (std::string name; std::getline(list, name, ',');) {
      commands.push_back(name.substr(name.find_first_not_of(' ')));
    }
    return commands;
  }
};

// The lines of the "Examples:" section of a --help text (without their indentation).
std::vector<std::string> Examples(const std::string& help) {
  std::vector<std::string> examples;
  std::istringstream lines(help);
  bool in = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "Examples:") {
      in = true;
    } else if (in && line.rfind("  ", 0) == 0) {
      examples.push_back(line.substr(2));
    } else if (in) {
      break;
    }
  }
  return examples;
}

// The fp8audit command line in an example ("source <(fp8audit completion bash)": the part
// inside), as words: from the word fp8audit to the first shell operator or comment.
std::vector<std::string> Fp8auditWords(const std::string& example) {
  const size_t start = example.find("fp8audit ");
  if (start == std::string::npos) return {};
  const size_t end = example.find_first_of(")|>#;&", start);
  std::istringstream words(example.substr(start, end == std::string::npos ? end : end - start));
  std::vector<std::string> out;
  for (std::string w; words >> w;) out.push_back(w);
  return out;
}

TEST_F(HelpCli, TheExamplesSectionsFirstCommandIsTheRealCommandLine) {
  EXPECT_EQ(Fp8auditWords("source <(fp8audit completion bash)   # here"),
            (std::vector<std::string>{"fp8audit", "completion", "bash"}));
  EXPECT_EQ(Examples("usage\n\nExamples:\n  fp8audit run x  # y\n  b\n\nmore\n"),
            (std::vector<std::string>{"fp8audit run x  # y", "b"}));
}

TEST_F(HelpCli, EveryHelpEndsWithExamplesWhoseFirstCommandRuns) {
  const std::vector<std::string> commands = Commands();
  ASSERT_GE(commands.size(), 5u);
  // Stand-ins for what a job is launched with: they run (the agent preloaded) and succeed.
  const std::string bin = Path("bin");
  fs::create_directories(bin);
  for (const char* launcher : {"torchrun", "python", "accelerate", "srun"}) {
    const std::string stub = bin + "/" + launcher;
    std::ofstream(stub) << "#!/bin/sh\nexit 0\n";
    ::chmod(stub.c_str(), 0755);
  }
  fs::create_directories(Path("fp8audit-traces"));
  WriteTrace("fp8audit-traces/earlier.fp8trace", Passing());
  const std::map<std::string, std::string> env = {
      {"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT},
      {"FP8AUDIT_FAKE_TRACE", "1/1,1/1"},
      {"PATH", bin + ":" + std::getenv("PATH")},
  };
  std::vector<std::string> helps = {""};
  helps.insert(helps.end(), commands.begin(), commands.end());
  for (const std::string& command : helps) {
    SCOPED_TRACE("fp8audit " + command + " --help");
    const Result help = command.empty() ? Fp8audit({"--help"}) : Fp8audit({command, "--help"});
    ASSERT_EQ(help.code, 0) << Describe(help);
    const std::vector<std::string> examples = Examples(help.out);
    ASSERT_FALSE(examples.empty()) << "no Examples section:\n" << help.out;
    EXPECT_LE(examples.size(), 2u) << help.out;
    std::vector<std::string> words = Fp8auditWords(examples.front());
    ASSERT_GE(words.size(), 2u) << examples.front();
    if (!command.empty()) {
      EXPECT_EQ(words[1], command) << examples.front();
    }
    words.erase(words.begin());
    const Result r = Fp8audit(words, env);
    EXPECT_EQ(r.code, 0) << examples.front() << "\n" << Describe(r);
    EXPECT_FALSE(Contains(r.err, " --help')")) << examples.front() << "\n" << Describe(r);
  }
}

}  // namespace
}  // namespace fp8audit
