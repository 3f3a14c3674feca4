// The te-call probe: Transformer Engine's DelayedScaling update entry points, defined by the
// preloaded libfp8audit.so (shim.cc) ahead of libtransformer_engine.so. Every call reaches
// TeCallProbe::Begin before TE's own function runs and End after it returns; one call is one
// update of `tensors` tensors (TE 2.x: nvte_delayed_scaling_recipe_amax_and_scale_update_after_
// reduction, the fused bulk update that the PyTorch extension calls once per autocast key and
// direction, and nvte_delayed_scaling_recipe_amax_and_scale_update, one tensor). No tensor is read
// and nothing is synchronised. Direction: fp8_dtype E5M2 (NVTEDType 8) is a backward update (only
// HYBRID uses E5M2, for gradients); E4M3 (7) and anything else go through the kernel probe's rules
// (converter.h: HYBRID makes E4M3 forward, E4M3-only recipes and unknown dtypes take the calling
// thread's pass).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "agent/src/raw_event.h"
#include "agent/src/record_sink.h"

namespace fp8audit::agent {

enum class TeEntry : uint8_t { kAmaxAndScaleUpdate = 0, kAfterReduction = 1 };
inline constexpr int kTeEntries = 2;

// The entry point's C name; nullptr for a value that is not an entry.
const char* TeEntryName(int entry);
// What an NVTEDType (transformer_engine.h: kNVTEFloat8E4M3 = 7, kNVTEFloat8E5M2 = 8) says.
ScaledMax FromTeDtype(int fp8_dtype);

class TeCallProbe {
 public:
  // `first_call`: run once, at the first call, before it is recorded (the agent collects the CUDA
  // facts and releases a provisional CUPTI subscription there).
  explicit TeCallProbe(RecordSink* sink, std::function<void()> first_call = {});
  // A call of `entry` starts on this thread. False when nothing was recorded (then End is not
  // to be called).
  bool Begin(int entry, int fp8_dtype, uint64_t tensors);
  // That call returned. A call that throws never reaches End: the thread's next Begin resets.
  void End();

 private:
  RecordSink& sink_;
  std::function<void()> first_call_;
  std::atomic<bool> called_{false};
};

}  // namespace fp8audit::agent
