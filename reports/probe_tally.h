// What each probe (the agent's recording sources) saw of a microbatch's FP8 state updates, and
// whether the probes at work agree. Counted updates and cross-checks (a second probe's view of an
// update another recorded) are tallied per source and direction (0 forward, 1 backward); the
// Python hook's updates on TE's unfused path are apart, since no other probe can see them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8audit/report.pb.h"
#include "fp8audit/trace.pb.h"
#include "fp8audit/vocabulary.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// Sources an update is tallied by, and the probe each one is.
inline constexpr int kKernel = 0;
inline constexpr int kTeCall = 1;
inline constexpr int kHook = 2;
inline constexpr int kOther = 3;
inline constexpr int kSources = 4;
int SourceIndex(v1::Source source);

// The probe each source but kOther is (its name: ProbeName, fp8audit/vocabulary.h).
inline constexpr std::array<Probe, 3> kSourceProbe = {Probe::kKernel, Probe::kTeCall,
                                                      Probe::kPythonHook};
// Sets of probes are vocabulary.h's ProbeBit bits. By name: the names the agent writes in the
// header's and PROBES events' `probes` (ParseProbe: an older trace's "cupti" is the kernel probe);
// 0 for a name that is not a probe's.
using ::fp8audit::ProbeBit;
uint32_t ProbeBit(std::string_view name);

// The unfused updates a Python hook range names ("... unfused=U"), at most `count`.
uint64_t HookUnfused(std::string_view detail, uint64_t count);

uint64_t SatAdd(uint64_t a, uint64_t b);  // a + b, at most UINT64_MAX
uint32_t Sat32(uint64_t v);               // v, at most UINT32_MAX

struct ProbeTallies {
  std::array<std::array<uint64_t, 2>, kSources> counted_by{};  // counted updates
  std::array<std::array<uint64_t, 2>, kSources> cross_by{};    // cross-checks
  std::array<uint64_t, 2> unfused{};  // of the hook's counted updates, TE's unfused path

  // An update counted `n` times in `dir`, recorded by `source` with `detail`.
  void Count(v1::Source source, int dir, uint64_t n, std::string_view detail);
  void CrossCheck(v1::Source source, int dir, uint64_t n);
  void Add(const ProbeTallies& other);
  // Some source counted or cross-checked something.
  bool Any() const;
  // Each source that saw something, with what it saw.
  void WriteTo(v1::SourceTallies* by) const;
  // The probes of `compared` (ProbeBit bits) when at least two of them saw different numbers of
  // fused updates in `dir`: "te-call 1, kernel 2" (te-call, kernel, python-hook in that order);
  // else "".
  std::string Disagreement(uint32_t compared, int dir) const;
};

// The probes active now, by name (printable, at most 16; a probe's by its ProbeName, so an older
// trace's "cupti" is listed as "kernel"): each change adds the new ones to a
// Recording's probes and those no longer active to its released (each list at most 16, once a
// name).
class ActiveProbes {
 public:
  // `probes` are the active ones from now on; returns their ProbeBits.
  uint32_t Set(const google::protobuf::RepeatedPtrField<std::string>& probes, v1::Recording* rec);

 private:
  std::vector<std::string> names_;
};

}  // namespace fp8audit::reports
