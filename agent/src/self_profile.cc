#include "agent/src/self_profile.h"

#include <time.h>

#include <array>
#include <atomic>
#include <cstdio>

namespace fp8audit::agent {
namespace {

constexpr size_t kHandlers = static_cast<size_t>(Handler::kCount);
std::array<std::atomic<uint64_t>, kHandlers> g_calls{};
std::array<std::atomic<uint64_t>, kHandlers> g_ns{};
constexpr const char* kNames[kHandlers] = {"launch callbacks", "other driver callbacks",
                                           "resource callbacks", "NVTX calls"};

std::atomic<uint64_t> g_clock_ns{0};  // what one reading of the clock costs, measured

}  // namespace

std::atomic<bool> g_self_profile_on{false};

void EnableSelfProfile() {
  constexpr int kReadings = 1000;
  const uint64_t t0 = SelfProfileNow();
  uint64_t last = t0;
  for (int i = 0; i < kReadings; ++i) last = SelfProfileNow();
  g_clock_ns.store((last - t0) / kReadings, std::memory_order_relaxed);
  g_self_profile_on.store(true, std::memory_order_relaxed);
}

uint64_t SelfProfileNow() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

void HandlerTimer::Add() const {
  const auto i = static_cast<size_t>(h_);
  g_ns[i].fetch_add(SelfProfileNow() - t0_, std::memory_order_relaxed);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
}

std::string SelfProfileSummary(const std::string& nvtx_domains) {
  if (!SelfProfileOn()) return {};
  std::string out = "self-profile:";
  uint64_t total_ns = 0;
  for (size_t i = 0; i < kHandlers; ++i) {
    const uint64_t n = g_calls[i].load(std::memory_order_relaxed);
    const uint64_t ns = g_ns[i].load(std::memory_order_relaxed);
    total_ns += ns;
    char part[160];
    std::snprintf(part, sizeof(part), "%s %llu %s (%.0f ns each)", i == 0 ? "" : ";",
                  static_cast<unsigned long long>(n), kNames[i],
                  n == 0 ? 0.0 : static_cast<double>(ns) / static_cast<double>(n));
    out += part;
  }
  char total[160];
  std::snprintf(total, sizeof(total),
                "; %.3f ms in the agent's handlers in all (each call includes one clock reading, "
                "%llu ns)",
                static_cast<double>(total_ns) / 1e6,
                static_cast<unsigned long long>(g_clock_ns.load(std::memory_order_relaxed)));
  out += total;
  if (!nvtx_domains.empty()) out += "; NVTX domains: " + nvtx_domains;
  return out;
}

}  // namespace fp8audit::agent
