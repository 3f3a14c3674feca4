// The agent's own cost, measured in the job (FP8AUDIT_SELF_PROFILE=1): how many times each of its
// handlers ran and the host time spent inside them, printed as one stderr line at exit. Off (the
// default), a handler pays one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace fp8audit::agent {

enum class Handler : uint8_t {
  kLaunch,       // CUPTI driver callback of a kernel launch (either site)
  kDriverOther,  // other CUPTI driver callbacks (graph launch, stream capture)
  kResource,     // CUPTI resource callbacks
  kNvtx,         // every NVTX call the injection receives
  kCount,
};

extern std::atomic<bool> g_self_profile_on;
void EnableSelfProfile();  // also measures what one clock reading costs
inline bool SelfProfileOn() { return g_self_profile_on.load(std::memory_order_relaxed); }
uint64_t SelfProfileNow();

// Times one handler call when self-profiling is on.
class HandlerTimer {
 public:
  explicit HandlerTimer(Handler h) : h_(h), t0_(SelfProfileOn() ? SelfProfileNow() : 0) {}
  ~HandlerTimer() {
    if (t0_ != 0) Add();
  }
  HandlerTimer(const HandlerTimer&) = delete;
  HandlerTimer& operator=(const HandlerTimer&) = delete;

 private:
  void Add() const;
  Handler h_;
  uint64_t t0_;
};

// "calls and time per handler" for the exit line; `nvtx_domains` names the NVTX domains that sent
// events with their call counts. Empty when self-profiling is off.
std::string SelfProfileSummary(const std::string& nvtx_domains);

}  // namespace fp8audit::agent
