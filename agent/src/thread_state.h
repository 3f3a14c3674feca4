// ThreadState: what is kept per thread (owned by the thread itself), beside its ring: the
// recorder's part (the thread's role, for pass_tracker.h), the probes' shared ledger
// (record_sink.h) and each probe's own part, declared with its probe. Probes reach their part
// through their accessor (defined in thread_state.cc), never through this header.
#pragma once

#include <cstdint>

#include "agent/src/hook_probe.h"
#include "agent/src/kernel_probe.h"
#include "agent/src/nvtx_probe.h"
#include "agent/src/record_sink.h"
#include "agent/src/rings.h"

namespace fp8audit::agent {

enum class Role : uint8_t { kUndecided, kTraining, kAutograd, kOther };

struct ThreadState : ThreadRing {
  Role role = Role::kUndecided;
  UpdateLedger ledger;
  KernelThreadState kernel;
  NvtxThreadState nvtx;
  HookThreadState hook;
};

}  // namespace fp8audit::agent
