#include "agent/src/te_probe.h"

#include <limits>

namespace fp8audit::agent {
namespace {

constexpr const char* kNames[kTeEntries] = {
    "nvte_delayed_scaling_recipe_amax_and_scale_update",
    "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction",
};

// What the events of each entry point name (their detail); never freed.
const FunctionInfo* EntryInfo(int entry) {
  static const FunctionInfo* infos = [] {
    auto* fi = new FunctionInfo[kTeEntries];
    for (int i = 0; i < kTeEntries; ++i) {
      fi[i].name = kNames[i];
      fi[i].event = RuleEvent::kUpdate;
    }
    return fi;
  }();
  return &infos[entry];
}

}  // namespace

const char* TeEntryName(int entry) {
  return entry >= 0 && entry < kTeEntries ? kNames[entry] : nullptr;
}

ScaledMax FromTeDtype(int fp8_dtype) {
  if (fp8_dtype == 7) return ScaledMax::kE4M3;
  if (fp8_dtype == 8) return ScaledMax::kE5M2;
  return ScaledMax::kOther;
}

TeCallProbe::TeCallProbe(RecordSink* sink, std::function<void()> first_call)
    : sink_(*sink), first_call_(std::move(first_call)) {}

bool TeCallProbe::Begin(int entry, int fp8_dtype, uint64_t tensors) {
  if (TeEntryName(entry) == nullptr) return false;
  if (!called_.load(std::memory_order_acquire) && !called_.exchange(true) && first_call_) {
    first_call_();
  }
  ThreadState* ts = sink_.Self();
  if (ts == nullptr) return false;
  sink_.OnActivity(ts, "TE update call");
  RawEvent e;
  e.kind = RawKind::kTeCall;
  e.fn = EntryInfo(entry);
  e.rule = RuleEvent::kUpdate;
  e.scaled_max = FromTeDtype(fp8_dtype);
  e.SetTensors(static_cast<uint32_t>(tensors > std::numeric_limits<uint32_t>::max() ? 0 : tensors));
  sink_.Record(ts, &e);
  UpdateLedger& ledger = LedgerOf(ts);
  ledger.counted_updates += 1;
  ledger.te_call_depth = 1;  // TE's update functions do not nest; a thrown call left it set
  return true;
}

void TeCallProbe::End() {
  if (ThreadState* ts = sink_.Self(); ts != nullptr) LedgerOf(ts).te_call_depth = 0;
}

}  // namespace fp8audit::agent
