#include "cli/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/util/posix_fs.h"

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
  const testutil::TempDir tmp("fp8audit-launch-");
  const fs::path dir = tmp.path();
  const std::string plain = (dir / "plain").string();
  std::ofstream(plain) << "not executable";
  const LaunchResult p = LaunchAndWait({plain}, {});
  EXPECT_EQ(p.ShellCode(), 126);
  EXPECT_NE(p.error.find("Permission denied"), std::string::npos) << p.error;
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
  const testutil::TempDir tmp("fp8audit-sig-");
  const fs::path dir = tmp.path();
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
  // Our own disposition is back to what it was.
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// kill(2) of `sig` to this process from another one (a user's `kill -HUP`), once `ready` exists.
std::thread SendOnceReady(const std::string& ready, int sig) {
  return std::thread([ready, sig] {
    for (int i = 0; i < 3000 && !fs::exists(ready); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const pid_t parent = ::getpid();
    const pid_t sender = ::fork();
    if (sender == 0) {
      ::kill(parent, sig);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(sender, &status, 0);
  });
}

TEST(Launcher, HangupQuitUserAndPipeSignalsAreForwardedAsTermIs) {
  for (const auto& [sig, name] : std::vector<std::pair<int, std::string>>{{SIGHUP, "HUP"},
                                                                          {SIGQUIT, "QUIT"},
                                                                          {SIGUSR1, "USR1"},
                                                                          {SIGUSR2, "USR2"},
                                                                          {SIGPIPE, "PIPE"}}) {
    const testutil::TempDir dir("fp8audit-sigs-");
    const std::string ready = dir.Path("ready");
    std::thread sender = SendOnceReady(ready, sig);
    const LaunchResult r = Sh("trap 'exit 40' " + name + "; touch '" + ready +
                              "'; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
                              "exit 1");
    sender.join();
    EXPECT_EQ(r.ShellCode(), 40) << name;  // the command got it; this process lived on
    struct sigaction now {};
    ::sigaction(sig, nullptr, &now);
    EXPECT_EQ(now.sa_handler, SIG_DFL) << name;
  }
}

// The path of the C library this process has mapped (sh maps it too).
std::string MappedLibc() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find('/');
    if (at != std::string::npos && line.find("/libc.so") != std::string::npos) {
      return line.substr(at);
    }
  }
  return "";
}

TEST(Launcher, WaitsForDescendantsThatOutliveTheCommandAndHaveTheLibraryMapped) {
  const testutil::TempDir tmp("fp8audit-late-");
  const fs::path dir = tmp.path();
  const std::string libc = MappedLibc();
  ASSERT_FALSE(libc.empty());
  const std::string d = dir.string();
  ASSERT_EQ(::mkfifo((d + "/gate").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((d + "/go").c_str(), 0600), 0);
  // Opening `go` for writing (then closing it) lets the child go on: on_waiting does, once the
  // launcher waits for it; a watchdog does after 60 s should it never be called (then failing).
  std::atomic<bool> released{false};
  auto release = [&] {
    if (released.exchange(true)) return;
    const int fd = ::open((d + "/go").c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  };
  LaunchOptions options;
  options.wait_for_library = libc;
  std::vector<int> waited;
  options.on_waiting = [&](const std::vector<int>& pids) {
    waited = pids;
    release();
  };
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 6000 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    release();
  });
  // The command exits at once; its background child goes on only once the command has exited
  // (the FIFO's only writer closed) and the launcher waits for it, then writes a file.
  const LaunchResult waited_for = LaunchAndWait(
      {"sh", "-c",
       "cd '" + d + "' || exit 9; ( read x < gate; read y < go; echo late > out ) & " +
           "exec 3>gate; exit 0"},
      {}, options);
  done = true;
  watchdog.join();
  EXPECT_EQ(waited_for.ShellCode(), 0);
  std::ifstream out(dir / "out");
  std::string line;
  EXPECT_TRUE(std::getline(out, line) && line == "late") << "the late child was not waited for";
  EXPECT_FALSE(waited.empty());
}

// The command (or its late child) goes on only once `go` is opened for writing: Release opens it,
// once; a watchdog does after 60 s should nothing else (the test then fails on what it saw).
class Gate {
 public:
  explicit Gate(const std::string& name) : tmp_(name), dir_(tmp_.path()) {
    EXPECT_EQ(::mkfifo((dir_ / "go").c_str(), 0600), 0);
    EXPECT_EQ(::mkfifo((dir_ / "gate").c_str(), 0600), 0);
    watchdog_ = std::thread([this] {
      for (int i = 0; !done_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (i >= 6000) Release();
      }
    });
  }
  ~Gate() {
    done_ = true;
    watchdog_.join();
  }
  // Non-blocking: before the reader has opened `go` nothing happens, and a later call tries again.
  void Release() {
    if (released_) return;
    const int fd = ::open((dir_ / "go").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) return;
    released_ = true;
    ::close(fd);
  }
  std::string Dir() const { return dir_.string(); }

 private:
  testutil::TempDir tmp_;
  fs::path dir_;
  std::atomic<bool> released_{false};
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

TEST(Launcher, HeartbeatIsCalledWhileTheCommandRuns) {
  Gate gate("fp8audit-beat-");
  LaunchOptions options;
  options.heartbeat_ms = 5;
  int beats = 0;
  options.on_heartbeat = [&] {
    ++beats;
    gate.Release();  // the command can end only after a heartbeat
  };
  const LaunchResult r =
      LaunchAndWait({"sh", "-c", "read x < '" + gate.Dir() + "/go'; exit 0"}, {}, options);
  EXPECT_EQ(r.ShellCode(), 0);
  EXPECT_GE(beats, 1);
}

TEST(Launcher, HeartbeatGoesOnWhileWaitingForDescendants) {
  Gate gate("fp8audit-beat-late-");
  const std::string libc = MappedLibc();
  ASSERT_FALSE(libc.empty());
  LaunchOptions options;
  options.wait_for_library = libc;
  options.heartbeat_ms = 5;
  bool waiting = false;
  int beats_while_waiting = 0;
  options.on_waiting = [&](const std::vector<int>&) { waiting = true; };
  options.on_heartbeat = [&] {
    if (!waiting) return;
    ++beats_while_waiting;
    gate.Release();  // the late child can end only after a heartbeat while it is waited for
  };
  const std::string d = gate.Dir();
  const LaunchResult r = LaunchAndWait(
      {"sh", "-c",
       "cd '" + d + "' || exit 9; ( read x < gate; read y < go; echo late > out ) & " +
           "exec 3>gate; exit 0"},
      {}, options);
  EXPECT_EQ(r.ShellCode(), 0);
  std::ifstream out(d + "/out");
  std::string line;
  EXPECT_TRUE(std::getline(out, line) && line == "late") << "the late child was not waited for";
  EXPECT_GE(beats_while_waiting, 1);
}

// What the job preloads keeps its order, and comes first (a sanitizer's runtime must).
TEST(Launcher, PreloadKeepsTheJobsOwnFirstAndAddsTheAgentAfter) {
  EXPECT_EQ(AppendPreload(nullptr, "/a/lib.so"), "/a/lib.so");
  EXPECT_EQ(AppendPreload("", "/a/lib.so"), "/a/lib.so");
  EXPECT_EQ(AppendPreload("libasan.so.8", "/a/lib.so"), "libasan.so.8:/a/lib.so");
  EXPECT_EQ(AppendPreload("/x.so /y.so", "/a/lib.so"), "/x.so /y.so:/a/lib.so");
}

TEST(Launcher, AgentComesFromTheEnvironmentWhenSet) {
  const testutil::TempDir tmp("fp8audit-agent-");
  const fs::path dir = tmp.path();
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
}

}  // namespace
}  // namespace fp8audit::cli
