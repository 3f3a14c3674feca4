// NVTX probe: the agent is an NVTX injection library (InitializeInjectionNvtx2). It records the
// microbatch range and the step mark from any domain, and the structured messages of the
// "fp8audit" domain; other ranges and marks only keep the per-thread range stacks in step.
#pragma once

#include <string>

namespace fp8audit::agent {

// Fills one NVTX client's function tables (the argument is NVTX's NvtxGetExportTableFunc_t).
// Returns 1 on success, 0 when the tables cannot be read.
int InstallNvtxHandlers(const void* (*get_export_table)(unsigned int));

// "domain calls, ..." of the NVTX calls received while self-profiling (empty when none).
std::string NvtxCallsByDomain();

}  // namespace fp8audit::agent
