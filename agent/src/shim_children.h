// Whether the image an exec starts will load the agent again (shim.cc asks before every exec).
//
// A process of the job that runs without the agent records nothing, and a job whose training
// moved into it would pass unaudited. The loader loads the agent into a new image through the
// environment the exec hands it (LD_PRELOAD, CUDA_INJECTION64_PATH or NVTX_INJECTION64_PATH naming
// libfp8audit.so), and ignores LD_PRELOAD where the exec gains privileges (a set-user-ID or
// set-group-ID program of another owner). Programs the loader does not run (statically linked:
// /sbin/ldconfig, which ctypes.util runs with an environment of its own) never load a library and
// are not counted. An environment that sets FP8AUDIT_DISABLE turns the agent off on purpose.
//
// Everything here is async-signal-safe (exec may be called in a vfork child): stack buffers,
// open/pread/fstat/access, no allocation.
#ifndef FP8AUDIT_AGENT_SRC_SHIM_CHILDREN_H_
#define FP8AUDIT_AGENT_SRC_SHIM_CHILDREN_H_

#include <stddef.h>

namespace fp8audit::agent {

enum class ChildAgent {
  kLoads = 0,             // the new image loads the agent (or is not a dynamically linked program)
  kEnvironmentDrops = 1,  // its environment names no agent
  kPrivileged = 2,        // set-user-ID or set-group-ID: the loader ignores LD_PRELOAD
};

// The exec's target: `fd` >= 0 (fexecve), else `file`, looked up in PATH when `search_path` and it
// has no slash (execvp, execvpe: the caller's PATH, as glibc does). `envp`: the environment the
// exec hands on. `agent_name`: this library's file name ("libfp8audit.so"). `resolved` (size
// `size`) receives the program's path where known.
ChildAgent CheckChild(const char* file, int fd, bool search_path, char* const envp[],
                      const char* agent_name, char* resolved, size_t size);

// The word for a ChildAgent in a trace ("environment", "privileged").
const char* ChildAgentWord(ChildAgent c);

// Whether an FP8AUDIT_DISABLE value turns the agent off: "1", "true", "yes" or "on" (as
// config.cc's ParseBool reads true); null: no. The shim's one reading of it.
bool DisableValue(const char* value);

}  // namespace fp8audit::agent

#endif  // FP8AUDIT_AGENT_SRC_SHIM_CHILDREN_H_
