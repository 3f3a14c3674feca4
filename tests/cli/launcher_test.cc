#include "cli/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace fp8audit::cli {
namespace {

namespace fs = std::filesystem;

LaunchResult Sh(const std::string& script,
                const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return LaunchAndWait({"sh", "-c", script}, env);
}

TEST(Launcher, ReturnsTheCommandsExitCode) {
  EXPECT_EQ(Sh("exit 0").ShellCode(), 0);
  const LaunchResult r = Sh("exit 7");
  EXPECT_EQ(r.status, LaunchResult::Status::kExited);
  EXPECT_EQ(r.ShellCode(), 7);
}

TEST(Launcher, KilledCommandGives128PlusTheSignal) {
  const LaunchResult r = Sh("kill -TERM $$");
  EXPECT_EQ(r.status, LaunchResult::Status::kSignaled);
  EXPECT_EQ(r.code, SIGTERM);
  EXPECT_EQ(r.ShellCode(), 128 + SIGTERM);
}

TEST(Launcher, CommandNotFoundIs127AndNotExecutableIs126) {
  const LaunchResult r = LaunchAndWait({"fp8audit-no-such-command-x"}, {});
  EXPECT_EQ(r.status, LaunchResult::Status::kExecFailed);
  EXPECT_EQ(r.ShellCode(), 127);
  EXPECT_EQ(r.error, "fp8audit-no-such-command-x: command not found");
  const auto dir = fs::temp_directory_path() / ("fp8audit-launch-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string plain = (dir / "plain").string();
  std::ofstream(plain) << "not executable";
  const LaunchResult p = LaunchAndWait({plain}, {});
  EXPECT_EQ(p.ShellCode(), 126);
  EXPECT_NE(p.error.find("Permission denied"), std::string::npos) << p.error;
  fs::remove_all(dir);
}

TEST(Launcher, EnvironmentIsSetInTheChildOnly) {
  EXPECT_EQ(
      Sh("test \"$FP8AUDIT_T1\" = one && test \"$HOME\" = \"" + std::string(getenv("HOME")) + "\"",
         {{"FP8AUDIT_T1", "one"}})
          .ShellCode(),
      0);
  EXPECT_EQ(getenv("FP8AUDIT_T1"), nullptr);
}

TEST(Launcher, SigtermSentToUsIsForwardedToTheCommand) {
  const auto dir = fs::temp_directory_path() / ("fp8audit-sig-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ready = (dir / "ready").string();
  std::thread sender([&] {
    for (int i = 0; i < 1000 && !fs::exists(ready); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(::getpid(), SIGTERM);
  });
  const LaunchResult r = Sh("trap 'exit 42' TERM; touch '" + ready +
                            "'; i=0; while [ $i -lt 300 ]; do sleep 0.1; "
                            "i=$((i+1)); done; exit 1");
  sender.join();
  EXPECT_EQ(r.ShellCode(), 42);
  fs::remove_all(dir);
  // Our own disposition is back to what it was.
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(Launcher, PreloadPutsTheAgentFirst) {
  EXPECT_EQ(PrependPreload(nullptr, "/a/lib.so"), "/a/lib.so");
  EXPECT_EQ(PrependPreload("", "/a/lib.so"), "/a/lib.so");
  EXPECT_EQ(PrependPreload("/x.so /y.so", "/a/lib.so"), "/a/lib.so:/x.so /y.so");
}

TEST(Launcher, AgentComesFromTheEnvironmentWhenSet) {
  const auto dir = fs::temp_directory_path() / ("fp8audit-agent-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string lib = (dir / "libagent.so").string();
  std::ofstream(lib) << "x";
  ::setenv("FP8AUDIT_AGENT", lib.c_str(), 1);
  std::string error;
  EXPECT_EQ(FindAgentLibrary(&error), fs::canonical(lib).string()) << error;
  ::setenv("FP8AUDIT_AGENT", (dir / "missing.so").c_str(), 1);
  EXPECT_EQ(FindAgentLibrary(&error), "");
  EXPECT_NE(error.find("agent library not found"), std::string::npos) << error;
  EXPECT_NE(error.find("FP8AUDIT_AGENT"), std::string::npos) << error;
  ::unsetenv("FP8AUDIT_AGENT");
  // Default: next to the executable, ../lib/libfp8audit.so.
  error.clear();
  const std::string found = FindAgentLibrary(&error);
  if (found.empty()) {
    EXPECT_NE(error.find("lib/libfp8audit.so"), std::string::npos) << error;
  } else {
    EXPECT_EQ(fs::path(found).filename(), "libfp8audit.so");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8audit::cli
