// A stand-in for torchrun in tests of `fp8audit run`: a launcher process that inherits the agent
// (LD_PRELOAD) but launches no kernel and marks nothing, and starts one worker process per
// command, each with RANK, LOCAL_RANK and WORLD_SIZE set as torchrun sets them.
//
//   rank_launcher -- CMD0 [ARGS...] -- CMD1 [ARGS...] ...
//
// Worker i runs CMDi as rank i. Exits 0 when every worker did, else with the first failing
// worker's status (128+S when killed by signal S); 2 on bad usage.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::vector<std::vector<char*>> commands;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      commands.emplace_back();
    } else if (!commands.empty()) {
      commands.back().push_back(argv[i]);
    } else {
      std::fprintf(stderr, "usage: rank_launcher -- CMD0 [ARGS...] -- CMD1 [ARGS...] ...\n");
      return 2;
    }
  }
  if (commands.empty()) {
    std::fprintf(stderr, "usage: rank_launcher -- CMD0 [ARGS...] -- CMD1 [ARGS...] ...\n");
    return 2;
  }
  const std::string world = std::to_string(commands.size());
  std::vector<pid_t> workers;
  for (size_t rank = 0; rank < commands.size(); ++rank) {
    std::vector<char*>& cmd = commands[rank];
    if (cmd.empty()) {
      std::fprintf(stderr, "rank_launcher: rank %zu has no command\n", rank);
      return 2;
    }
    cmd.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("rank_launcher: fork");
      return 2;
    }
    if (pid == 0) {
      const std::string r = std::to_string(rank);
      ::setenv("RANK", r.c_str(), 1);
      ::setenv("LOCAL_RANK", r.c_str(), 1);
      ::setenv("WORLD_SIZE", world.c_str(), 1);
      ::execvp(cmd[0], cmd.data());
      std::perror("rank_launcher: exec");
      ::_exit(127);
    }
    workers.push_back(pid);
  }
  int code = 0;
  for (pid_t pid : workers) {
    int status = 0;
    if (::waitpid(pid, &status, 0) < 0) return 2;
    const int c = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0) code = c;
  }
  return code;
}
