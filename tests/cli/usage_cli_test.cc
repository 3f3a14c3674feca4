// What a user who mistypes sees (issue 23): one line naming the problem and one hint, never the
// whole help; an unknown command gets the nearest real one; usage names the program, not its path;
// a flag that had nothing to act on says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Describe;
using cli_testing::Result;
using testing::Contains;

size_t Lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

using UsageCli = CliTest;

TEST_F(UsageCli, AMistypedCommandIsNamedWithTheNearestOneAndAHint) {
  const Result r = Fp8audit({"rpeort", "x"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(r.err,
            "fp8audit: unknown command 'rpeort' (did you mean 'report'?); the commands are model, "
            "run, report, check, completion (see 'fp8audit --help')\n")
      << Describe(r);
}

TEST_F(UsageCli, ACommandNothingIsNearIsListedWithoutAGuess) {
  const Result r = Fp8audit({"frobnicate"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit: unknown command 'frobnicate'; the commands are model, "))
      << Describe(r);
  EXPECT_FALSE(Contains(r.err, "did you mean")) << Describe(r);
}

TEST_F(UsageCli, AnUnknownFlagIsOneLineAndAHintNotTheWholeHelp) {
  const Result r = Fp8audit({"run", "--ouut", Path("out"), "--", "true"});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "fp8audit run: ")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--ouut")) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "(see 'fp8audit run --help')\n")) << Describe(r);
  EXPECT_EQ(Lines(r.err), 1u) << Describe(r);
}

TEST_F(UsageCli, NoCommandAtAllIsOneLineAndAHint) {
  const Result r = Fp8audit({});
  EXPECT_EQ(r.code, 2) << Describe(r);
  EXPECT_EQ(Lines(r.err), 1u) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "model, run, report, check")) << Describe(r);
}

// Numbers are read as written (issue 34 item 10): "010" is ten, not octal eight; "0x10", "1e1"
// and a "nan" duration are refused in one line.
TEST_F(UsageCli, NumbersAreDecimalAndDurationsFinite) {
  const Result ten =
      Fp8audit({"model", "--layers", "1", "--microbatches", "010", "--format", "json"});
  EXPECT_EQ(ten.code, 0) << Describe(ten);
  size_t rows = 0;
  for (size_t at = ten.out.find("\"forward_updates\""); at != std::string::npos;
       at = ten.out.find("\"forward_updates\"", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 10u) << ten.out;
  for (const char* bad : {"0x10", "1e1", "-1", " 7"}) {
    const Result r = Fp8audit({"model", "--layers", "1", "--microbatches", bad});
    EXPECT_EQ(r.code, 2) << bad << Describe(r);
    EXPECT_TRUE(Contains(r.err, "--microbatches: not a whole number in decimal")) << Describe(r);
    EXPECT_EQ(Lines(r.err), 1u) << Describe(r);
  }
  const Result nan = Fp8audit({"run", "--heartbeat", "nan", "--", "true"});
  EXPECT_EQ(nan.code, 2) << Describe(nan);
  EXPECT_TRUE(Contains(nan.err, "--heartbeat: not a finite number: nan")) << Describe(nan);
}

TEST_F(UsageCli, HelpNamesTheProgramNotItsPath) {
  const Result r = Fp8audit({"--help"});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "Usage: fp8audit [OPTIONS] SUBCOMMAND")) << Describe(r);
  const Result sub = Fp8audit({"report", "--help"});
  EXPECT_TRUE(Contains(sub.out, "Usage: fp8audit report [OPTIONS]")) << Describe(sub);
}

TEST_F(UsageCli, FixTeOnAJobThatNeverImportedTransformerEngineSaysNothingWasPatched) {
  Result r = Run({"--fix-te", "--", "true"}, "1/1");
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       "fp8audit run: --fix-te: no process of the command imported Transformer "
                       "Engine (no trace records its version): nothing was patched\n"))
      << Describe(r);
  r = Run({"--fix-te", "--", "true"}, "1/1", {{"FP8AUDIT_FAKE_TE_VERSION", "2.20.2"}});
  EXPECT_EQ(r.code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "nothing was patched")) << Describe(r);
  r = Run({"--", "true"}, "1/1");  // without --fix-te nothing is said of it
  EXPECT_FALSE(Contains(r.err, "nothing was patched")) << Describe(r);
}

// A file that is not a trace, named by mistake (issue 35): one line saying so, no report; a damaged
// file named as a trace (*.fp8trace) is still read and reported as damaged.
TEST_F(UsageCli, AFileThatIsNotATraceIsRefusedInOneLine) {
  const std::string readme = Path("README.md");
  std::ofstream(readme) << "# a project\n\nSome text.\n";
  for (const char* command : {"report", "check"}) {
    const Result r = Fp8audit({command, readme});
    EXPECT_EQ(r.code, 2) << Describe(r);
    EXPECT_EQ(r.err, std::string("fp8audit ") + command + ": " + readme +
                         ": not an fp8audit trace (it does not begin with a trace header; traces "
                         "are the *.fp8trace files fp8audit run writes)\n")
        << Describe(r);
    EXPECT_EQ(r.out, "") << Describe(r);
  }
  std::ofstream(Path("damaged.fp8trace")) << "# a project\n";
  const Result damaged = Fp8audit({"check", Path("damaged.fp8trace")});
  EXPECT_EQ(damaged.code, 2) << Describe(damaged);
  EXPECT_TRUE(Contains(damaged.out + damaged.err, "INCOMPLETE")) << Describe(damaged);
}

// A mistyped flag is named with the nearest real one (issue 35), for a command's flags and for the
// program's own.
TEST_F(UsageCli, AMistypedFlagIsNamedWithTheNearestOne) {
  const Result top = Fp8audit({"--verison"});
  EXPECT_EQ(top.code, 2) << Describe(top);
  EXPECT_TRUE(Contains(top.err, "fp8audit: unknown flag '--verison' (did you mean '--version'?)"))
      << Describe(top);
  const Result sub = Fp8audit({"check", Path("x"), "--expect-forwrd", "2"});
  EXPECT_EQ(sub.code, 2) << Describe(sub);
  EXPECT_EQ(sub.err,
            "fp8audit check: unknown flag '--expect-forwrd' (did you mean '--expect-forward'?) "
            "(see 'fp8audit check --help')\n")
      << Describe(sub);
  const Result far = Fp8audit({"report", Path("x"), "--zzzzzz"});
  EXPECT_EQ(far.code, 2) << Describe(far);
  EXPECT_TRUE(Contains(far.err, "fp8audit report: unknown flag '--zzzzzz' (see")) << Describe(far);
}

// Colour (issue 35): verdict words in colour on a terminal or under FORCE_COLOR, never under
// NO_COLOR alone nor into a pipe.
TEST_F(UsageCli, VerdictsAreColouredOnlyWhereColourIsWanted) {
  testing::TraceBuilder t;
  t.MarkedMicrobatch(2, 1);
  const std::string trace = WriteTrace("t.fp8trace", t);
  const Result piped = Fp8audit({"check", trace});
  EXPECT_EQ(piped.code, 3) << Describe(piped);
  EXPECT_FALSE(Contains(piped.out, "\x1b[")) << Describe(piped);
  const Result forced = Fp8audit({"report", trace}, {{"FORCE_COLOR", "1"}, {"NO_COLOR", "1"}});
  EXPECT_EQ(forced.code, 3) << Describe(forced);
  EXPECT_TRUE(Contains(forced.out, "fp8audit report: \x1b[1;31mFAIL\x1b[0m, 1 trace"))
      << Describe(forced);
  const Result json = Fp8audit({"report", trace, "--format", "json"}, {{"FORCE_COLOR", "1"}});
  EXPECT_FALSE(Contains(json.out, "\x1b[")) << Describe(json);
}

// Flags that cannot go together, or a --fix-te that cannot be armed, are bad flags: refused in one
// line, exit 2, before --out is made and before CMD is looked up (a CMD not found is not 127
// then).
TEST_F(UsageCli, ConflictingRunFlagsAreRefusedBeforeAnythingIsCreatedOrLookedUp) {
  const std::map<std::string, std::string> agent = {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT},
                                                    {"FP8AUDIT_FAKE_TRACE", "1/1"}};
  auto model_missing = agent;
  model_missing["FP8AUDIT_MODEL_LIB"] = Path("no-such-model.so");
  struct Case {
    std::vector<std::string> flags;
    std::map<std::string, std::string> env;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"--fix-te", "--no-python-hook"},
       agent,
       "--fix-te works through the Python hook: drop --no-python-hook"},
      {{"--fix-te", "--no-python-hook"},
       {{"FP8AUDIT_AGENT", Path("missing.so")}},
       "--fix-te works through the Python hook: drop --no-python-hook"},
      {{"--fix-te"},
       model_missing,
       "--fix-te: FP8AUDIT_MODEL_LIB=" + Path("no-such-model.so") + " is not a file"},
  };
  for (const Case& c : cases) {
    for (const std::string command : {"true", "fp8audit-no-such-command"}) {
      std::vector<std::string> args = {"run", "--out", "conflictdir"};
      args.insert(args.end(), c.flags.begin(), c.flags.end());
      args.insert(args.end(), {"--", command});
      const Result r = Fp8audit(args, c.env);
      EXPECT_EQ(r.code, 2) << Describe(r);
      EXPECT_EQ(r.err, "fp8audit run: " + c.line + "\n") << Describe(r);
      EXPECT_FALSE(std::filesystem::exists(Path("conflictdir"))) << Describe(r);
      std::filesystem::remove_all(Path("conflictdir"));  // each case on its own
    }
  }
}

// What `run --help` says the Python hook does: everything a job loses without it.
TEST_F(UsageCli, RunHelpSaysWhatThePythonHookRecords) {
  const Result r = Fp8audit({"run", "--help"});
  ASSERT_EQ(r.code, 0) << Describe(r);
  const size_t at = r.out.find("--no-python-hook");
  ASSERT_NE(at, std::string::npos) << Describe(r);
  std::string text;  // the flag's description, its lines joined
  for (size_t i = at; i < r.out.size() && r.out.compare(i, 4, "\n  -") != 0; ++i) {
    const char c = r.out[i] == '\n' ? ' ' : r.out[i];
    if (c != ' ' || text.empty() || text.back() != ' ') text += c;
  }
  for (const char* what : {"version", "reduce_and_update_fp8_tensors", "recipe", "1/1",
                           "fp8_output", "fp8_grad", "weight", "frozen"}) {
    EXPECT_TRUE(Contains(text, what)) << what << "\n" << text;
  }
}

}  // namespace
}  // namespace fp8audit
