#include "agent/src/thread_state.h"

namespace fp8audit::agent {

UpdateLedger& LedgerOf(ThreadState* ts) { return ts->ledger; }
KernelThreadState& KernelStateOf(ThreadState* ts) { return ts->kernel; }
NvtxThreadState& NvtxStateOf(ThreadState* ts) { return ts->nvtx; }
HookThreadState& HookStateOf(ThreadState* ts) { return ts->hook; }

}  // namespace fp8audit::agent
