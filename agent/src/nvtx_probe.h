// NVTX probe: the agent is an NVTX injection library (InitializeInjectionNvtx2). It records the
// microbatch range and the step mark from any domain, and the structured messages of the
// "fp8audit" domain; other ranges and marks only keep the per-thread range stacks in step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "agent/src/config.h"
#include "agent/src/record_sink.h"

namespace fp8audit::agent {

struct ThreadState;

// The NVTX probe's part of a thread's state (thread_state.h holds it): a range stack per domain.
inline constexpr int kMaxDomainStacks = 8;
struct NvtxThreadState {
  struct RangeStack {
    const void* domain = nullptr;
    uint32_t depth = 0;
    uint64_t microbatch_bits = 0;  // bit d: the range at depth d is a microbatch range
  };
  RangeStack stacks[kMaxDomainStacks];
  int nstacks = 0;
};
NvtxThreadState& NvtxStateOf(ThreadState* ts);

// What the NVTX probe is handed by the agent: the configuration (its microbatch range and step
// mark; it outlives the probe), where it records, and what it calls when the Python hook shows
// Transformer Engine (`te_seen`, with why) and at a hook update range (`hook_update`: CUDA is in
// use by then).
struct NvtxProbeHost {
  const Config* config = nullptr;
  RecordSink* sink = nullptr;
  std::function<void(const char* why)> te_seen;
  std::function<void()> hook_te;  // the Python hook's mark that TE was imported
  std::function<void()> hook_update;
};

// Fills one NVTX client's function tables (the argument is NVTX's NvtxGetExportTableFunc_t). The
// first call's `host` serves every client. Returns 1 on success, 0 when the tables cannot be read.
int InstallNvtxHandlers(const void* (*get_export_table)(unsigned int), const NvtxProbeHost& host);

// "domain calls, ..." of the NVTX calls received while self-profiling (empty when none).
std::string NvtxCallsByDomain();

}  // namespace fp8audit::agent
