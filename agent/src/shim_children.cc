#include "agent/src/shim_children.h"

#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <initializer_list>

#include "fp8audit/vocabulary.h"

namespace fp8audit::agent {
namespace {

// `value`'s last path component (after the last slash), `n` bytes long, is `name`.
bool BaseNameIs(const char* value, size_t n, const char* name) {
  size_t start = n;
  while (start > 0 && value[start - 1] != '/') --start;
  const size_t len = strlen(name);
  return n - start == len && memcmp(value + start, name, len) == 0;
}

// "NAME=value" in `envp`: the value, or null.
const char* Find(char* const envp[], const char* name) {
  const size_t len = strlen(name);
  for (size_t i = 0; envp != nullptr && envp[i] != nullptr; ++i) {
    if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=') return envp[i] + len + 1;
  }
  return nullptr;
}

// The environment loads the agent, or turns it off on purpose.
bool EnvironmentCarriesAgent(char* const envp[], const char* agent_name) {
  if (DisableValue(Find(envp, "FP8AUDIT_DISABLE"))) return true;
  if (const char* preload = Find(envp, "LD_PRELOAD"); preload != nullptr) {
    // The loader splits LD_PRELOAD at spaces and colons.
    for (const char* p = preload; *p != '\0';) {
      const size_t n = strcspn(p, " :\t");
      if (n > 0 && BaseNameIs(p, n, agent_name)) return true;
      p += n;
      if (*p != '\0') ++p;
    }
  }
  for (const char* var : {"CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"}) {
    const char* v = Find(envp, var);
    if (v != nullptr && BaseNameIs(v, strlen(v), agent_name)) return true;
  }
  return false;
}

// execvp's lookup: the first executable `file` in the caller's PATH, into `out`.
bool SearchPath(const char* file, char* out, size_t size) {
  const char* path = getenv("PATH");
  if (path == nullptr) path = "/bin:/usr/bin";
  const size_t flen = strlen(file);
  for (const char* p = path;;) {
    const size_t n = strcspn(p, ":");
    const size_t dir = n == 0 ? 1 : n;  // an empty entry is the working directory
    if (dir + 1 + flen < size) {
      memcpy(out, n == 0 ? "." : p, dir);
      out[dir] = '/';
      memcpy(out + dir + 1, file, flen + 1);
      if (access(out, X_OK) == 0) return true;
    }
    if (p[n] == '\0') return false;
    p += n + 1;
  }
}

// The program the loader runs for an ELF file: whether it names an interpreter (PT_INTERP, a
// dynamically linked program). Scripts ("#!") start an interpreter that is one; a file that opens
// but cannot be parsed counts as one too (the audit would rather name a process than miss it).
bool Dynamic(int fd) {
  unsigned char head[sizeof(Elf64_Ehdr)];
  const ssize_t got = pread(fd, head, sizeof(head), 0);
  if (got < 4) return true;
  if (head[0] == '#' && head[1] == '!') return true;
  if (memcmp(head, ELFMAG, SELFMAG) != 0 || got < static_cast<ssize_t>(sizeof(Elf64_Ehdr))) {
    return true;
  }
  if (head[EI_CLASS] != ELFCLASS64) return true;
  Elf64_Ehdr eh;
  memcpy(&eh, head, sizeof(eh));
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) return true;
  for (unsigned i = 0; i < eh.e_phnum && i < 256; ++i) {
    Elf64_Phdr ph;
    if (pread(fd, &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph))) !=
        static_cast<ssize_t>(sizeof(ph))) {
      return true;
    }
    if (ph.p_type == PT_INTERP) return true;
  }
  return false;
}

// The exec gains privileges: the loader runs in secure mode and ignores LD_PRELOAD's paths.
bool Privileged(const struct stat& st) {
  return ((st.st_mode & S_ISUID) != 0 && st.st_uid != geteuid()) ||
         ((st.st_mode & S_ISGID) != 0 && st.st_gid != getegid());
}

}  // namespace

ChildAgent CheckChild(const char* file, int fd, bool search_path, char* const envp[],
                      const char* agent_name, char* resolved, size_t size) {
  if (size == 0) return ChildAgent::kLoads;
  resolved[0] = '\0';
  const bool carries = EnvironmentCarriesAgent(envp, agent_name);
  int own = -1;
  if (fd < 0) {
    if (file == nullptr) return ChildAgent::kLoads;
    if (search_path && strchr(file, '/') == nullptr) {
      if (!SearchPath(file, resolved, size)) return ChildAgent::kLoads;  // the exec fails
    } else {
      strncpy(resolved, file, size - 1);
      resolved[size - 1] = '\0';
    }
    own = open(resolved, O_RDONLY | O_CLOEXEC);
    if (own < 0) return ChildAgent::kLoads;  // missing (a PATH candidate): the exec fails too
    fd = own;
  }
  ChildAgent result = ChildAgent::kLoads;
  struct stat st;
  const bool known = fstat(fd, &st) == 0;
  if (Dynamic(fd)) {
    if (!carries) {
      result = ChildAgent::kEnvironmentDrops;
    } else if (known && Privileged(st)) {
      result = ChildAgent::kPrivileged;
    }
  }
  if (own >= 0) close(own);
  return result;
}

bool DisableValue(const char* value) {
  if (value == nullptr) return false;
  for (const char* t : {"1", "true", "yes", "on"}) {
    if (strcmp(value, t) == 0) return true;
  }
  return false;
}

const char* ChildAgentWord(ChildAgent c) {
  switch (c) {
    case ChildAgent::kEnvironmentDrops:
      return kChildWithoutAgentEnvironment.data();  // literals: NUL-terminated
    case ChildAgent::kPrivileged:
      return kChildWithoutAgentPrivileged.data();
    default:
      return "loads";
  }
}

}  // namespace fp8audit::agent
