// `fp8audit run --heartbeat` on a terminal: standard error on a pseudo-terminal, the command held
// until a heartbeat line has come (no timing: it cannot end before one), its own output intact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <string>

#include "tests/cli/cli_fixture.h"

namespace fp8audit {
namespace {

using cli_testing::CliTest;
using cli_testing::Result;
using testing::Contains;

class HeartbeatCli : public CliTest {
 protected:
  // Runs fp8audit with standard error on a pseudo-terminal (standard output to a file);
  // `on_err` sees what has come on standard error so far ('\r' removed) each time more comes.
  Result OnTerminal(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env,
                    const std::function<void(const std::string&)>& on_err) {
    const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
    EXPECT_GE(master, 0);
    EXPECT_EQ(::grantpt(master), 0);
    EXPECT_EQ(::unlockpt(master), 0);
    const std::string terminal = ::ptsname(master);
    std::vector<std::string> argv = {FP8AUDIT_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var = *e;
      const std::string name = var.substr(0, var.find('='));
      if (env.count(name) == 0 && name != "FP8AUDIT_AGENT") env_strings.push_back(var);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argp, envp;
    for (auto& a : argv) argp.push_back(a.data());
    argp.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string out_path = Path("stdout.txt");
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int tty = ::open(terminal.c_str(), O_RDWR | O_NOCTTY);
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(out, 1);
      ::dup2(tty, 2);
      ::close(master);
      if (::chdir(dir_.c_str()) != 0) ::_exit(98);
      ::execve(argp[0], argp.data(), envp.data());
      ::_exit(99);
    }
    Result r;
    char buf[4096];
    while (true) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) {
        on_err(r.err);  // nothing new: let the caller act again
        continue;
      }
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: every process closed the terminal
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\r') r.err.push_back(buf[i]);
      }
      on_err(r.err);
    }
    ::close(master);
    int status = 0;
    ::waitpid(pid, &status, 0);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = cli_testing::Slurp(out_path);
    return r;
  }
};

TEST_F(HeartbeatCli, OnATerminalOneWholeLineComesWhileTheCommandRunsAndItsOutputStaysItsOwn) {
  const std::string go = Path("go");
  ASSERT_EQ(::mkfifo(go.c_str(), 0600), 0);
  bool released = false;
  const auto start = std::chrono::steady_clock::now();
  // The command ends once `go` is opened: after a heartbeat that counts its trace (or, should
  // none come, after 60 s, and the test fails).
  auto on_err = [&](const std::string& err) {
    const bool beat = Contains(err, "elapsed, 1 trace so far (");
    if (released ||
        (!beat && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))) {
      return;
    }
    const int fd = ::open(go.c_str(), O_WRONLY | O_NONBLOCK);  // no reader yet: next time
    if (fd >= 0) {
      released = true;
      ::close(fd);
    }
  };
  const Result r = OnTerminal(
      {"run", "--out", Path("out"), "--heartbeat", "0.01", "--", "sh", "-c",
       "echo job-out; echo job-err >&2; read x < '" + go + "'; echo job-done"},
      {{"FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT}, {"FP8AUDIT_FAKE_TRACE", "1/1,1/1"}}, on_err);
  EXPECT_EQ(r.code, 0) << cli_testing::Describe(r);
  EXPECT_EQ(r.out, "job-out\njob-done\n");  // standard output: the command's alone
  std::istringstream lines(r.err);
  int beats = 0;
  bool job_line = false;
  for (std::string line; std::getline(lines, line);) {
    if (Contains(line, "elapsed, ")) {
      ++beats;
      EXPECT_EQ(line.rfind("fp8audit run: ", 0), 0u) << line;  // whole lines, each its own
    }
    job_line = job_line || line == "job-err";
  }
  EXPECT_GE(beats, 1) << r.err;
  EXPECT_TRUE(job_line) << r.err;
  EXPECT_TRUE(Contains(r.err, "elapsed, 1 trace so far (")) << r.err;
}

}  // namespace
}  // namespace fp8audit
