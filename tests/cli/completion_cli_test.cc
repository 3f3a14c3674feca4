// `fp8audit completion bash|zsh` (issue 23): the scripts are read by the shells themselves; bash's
// is driven as bash's completion would drive it, and offers every flag the command's --help names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "tests/cli/cli_fixture.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Result;
using testing::Contains;

class CompletionCli : public CliTest {
 protected:
  // What bash's completion offers for the words (the last one being completed).
  std::string Offered(const std::string& words) {
    const Result script = Fp8audit({"completion", "bash"});
    EXPECT_EQ(script.code, 0) << Describe(script);
    std::ofstream(Path("c.bash")) << script.out;
    std::ofstream(Path("drive.sh"))
        << "source '" << Path("c.bash") << "'\n"
        << "COMP_WORDS=(" << words << ")\nCOMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        << "_fp8audit\necho \"${COMPREPLY[*]}\"\n";
    const Result r = Shell("bash", Path("drive.sh"));
    EXPECT_EQ(r.code, 0) << Describe(r);
    return r.out;
  }
  Result Shell(const std::string& shell, const std::string& script) {
    const std::string out = Path("shell.out"), err = Path("shell.err");
    const int status =
        std::system((shell + " '" + script + "' >'" + out + "' 2>'" + err + "'").c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = cli_testing::Slurp(out);
    r.err = cli_testing::Slurp(err);
    return r;
  }
};

TEST_F(CompletionCli, BashOffersCommandsThenTheirFlagsThenFiles) {
  EXPECT_EQ(Offered("fp8audit r"), "run report\n");
  EXPECT_EQ(Offered("fp8audit run --fi"), "--fix-te\n");
  EXPECT_EQ(Offered("fp8audit report --for"), "--format\n");
  std::ofstream(Path("trace-a.fp8trace")) << "";
  EXPECT_EQ(Offered("fp8audit report " + Path("trace-")), Path("trace-a.fp8trace") + "\n");
}

TEST_F(CompletionCli, BashLeavesTheWordsAfterRunsCommandToThatCommand) {
  // After CMD's name, fp8audit's flags are not offered (they would go to CMD).
  EXPECT_FALSE(Contains(Offered("fp8audit run python3 --fi"), "--fix-te"));
  EXPECT_FALSE(Contains(Offered("fp8audit run --out dir -- python3 --fi"), "--fix-te"));
  // A flag's value is not CMD: --out's directory is followed by run's flags still.
  EXPECT_EQ(Offered("fp8audit run --out dir --fi"), "--fix-te\n");
}

TEST_F(CompletionCli, EveryFlagOfEveryCommandsHelpIsOffered) {
  for (const std::string command : {"model", "run", "report", "check"}) {
    const Result help = Fp8audit({command, "--help"});
    ASSERT_EQ(help.code, 0) << Describe(help);
    const std::string offered = Offered("fp8audit " + command + " -");
    const std::regex flag("(^|[ ,])(--[a-z][a-z0-9-]+)");
    std::set<std::string> named;
    // The examples at the end hold the flags of the commands they launch (torchrun's).
    const std::string flags = help.out.substr(0, help.out.find("\nExamples:\n"));
    for (auto it = std::sregex_iterator(flags.begin(), flags.end(), flag);
         it != std::sregex_iterator(); ++it) {
      named.insert((*it)[2]);
    }
    EXPECT_FALSE(named.empty()) << help.out;
    for (const std::string& f : named) {
      EXPECT_TRUE(Contains(" " + offered, " " + f + " ") || Contains(" " + offered, " " + f + "\n"))
          << command << ": " << f << " not offered: " << offered;
    }
  }
}

TEST_F(CompletionCli, TheZshScriptIsValidZsh) {
  if (std::system("command -v zsh >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "zsh is not installed (scripts/setup.sh installs it)";
  }
  const Result script = Fp8audit({"completion", "zsh"});
  ASSERT_EQ(script.code, 0) << Describe(script);
  EXPECT_TRUE(Contains(script.out, "#compdef fp8audit\n"));
  EXPECT_TRUE(Contains(script.out, "run) flags=(--help -h --out ")) << script.out;
  std::ofstream(Path("c.zsh")) << script.out;
  const Result r = Shell("zsh -n", Path("c.zsh"));
  EXPECT_EQ(r.code, 0) << Describe(r);
}

// As `model`, `report` and `check`: a script that could not be written is an error, in one line.
TEST_F(CompletionCli, StandardOutputOnAFullDeviceFailsWithOneLine) {
  for (const std::string shell : {"bash", "zsh"}) {
    const Result r = Fp8audit({"completion", shell}, {}, "/dev/full");
    EXPECT_EQ(r.code, 2) << shell << ": " << Describe(r);
    EXPECT_EQ(r.err, "fp8audit completion: cannot write to standard output\n") << shell;
  }
}

TEST_F(CompletionCli, AnotherShellIsAUsageErrorInOneLineAndAHint) {
  const Result r = Fp8audit({"completion", "fish"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(
      r.err,
      "fp8audit completion: SHELL: fish not in {bash,zsh} (see 'fp8audit completion --help')\n");
}

}  // namespace
}  // namespace fp8audit
