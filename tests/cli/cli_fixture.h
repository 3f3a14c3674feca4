// The fixture of the fp8audit binary's tests (tests/cli/*_test.cc): the binary run as a user would,
// in a fresh directory, with its exit code, standard output and standard error.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::cli_testing {

namespace fs = std::filesystem;
using testing::Contains;
using testing::TraceBuilder;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string Slurp(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

class CliTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Path(name); }

  std::string WriteTrace(const std::string& name, const TraceBuilder& t) const {
    const std::string p = Path(name);
    EXPECT_TRUE(t.Write(p));
    return p;
  }

  // Runs fp8audit with `args`; `env` is set on top of this process's environment (a value of
  // "<unset>" removes the variable). `stdout_to`: a file to send standard output to instead of
  // collecting it (e.g. /dev/full; Result.out stays empty).
  Result Fp8audit(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env = {},
                  const std::string& stdout_to = "") const {
    std::vector<std::string> argv = {FP8AUDIT_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
    vars.erase("FP8AUDIT_AGENT");
    vars.erase("FORCE_COLOR");  // the tests read plain text unless one asks for colour
    for (const auto& [k, v] : env) {
      if (v == "<unset>") {
        vars.erase(k);
      } else {
        vars[k] = v;
      }
    }
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
    std::vector<char*> argp;
    for (auto& a : argv) argp.push_back(a.data());
    argp.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string out_path = stdout_to.empty() ? Path("stdout.txt") : stdout_to;
    const std::string err_path = Path("stderr.txt");
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = ::open("/dev/null", O_RDONLY);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::dup2(null, 0);
      if (::chdir(dir_.c_str()) != 0) ::_exit(98);
      ::execve(argp[0], argp.data(), envp.data());
      ::_exit(99);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (stdout_to.empty()) r.out = Slurp(out_path);
    r.err = Slurp(err_path);
    return r;
  }

  // `fp8audit run` with the fake agent writing `trace` ("F/B,..."; empty: no trace).
  Result Run(const std::vector<std::string>& args, const std::string& trace,
             std::map<std::string, std::string> env = {}) const {
    env.emplace("FP8AUDIT_AGENT", FP8AUDIT_FAKE_AGENT);
    env.emplace("FP8AUDIT_FAKE_TRACE", trace.empty() ? "<unset>" : trace);
    std::vector<std::string> all = {"run", "--out", Path("out")};
    all.insert(all.end(), args.begin(), args.end());
    return Fp8audit(all, env);
  }

  testutil::TempDir tmp_{"fp8audit-cli-"};
  const fs::path dir_{tmp_.path()};
};

inline std::string Describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

inline TraceBuilder Passing(int rank = 0, int pid = 100, int microbatches = 2) {
  TraceBuilder t(rank, pid, "nvtx");
  for (int i = 0; i < microbatches; ++i) t.MarkedMicrobatch();
  t.Footer();
  return t;
}

inline TraceBuilder Failing(int rank = 0, int pid = 100) {
  TraceBuilder t(rank, pid, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(29, 196).MarkedMicrobatch().Footer();
  return t;
}

#ifdef FP8AUDIT_REAL_AGENT
// The real agent for `fp8audit run`. A sanitized build's agent needs its sanitizer runtime, which
// then loads after the preloaded agent: allowed here, the launcher being uninstrumented.
inline std::map<std::string, std::string> RealAgentEnv() {
  return {{"FP8AUDIT_AGENT", FP8AUDIT_REAL_AGENT}, {"ASAN_OPTIONS", "verify_asan_link_order=0"}};
}
#endif

}  // namespace fp8audit::cli_testing
