#include "reports/probe_tally.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

// Probes compared with one another (by source), in the order a disagreement lists them.
constexpr std::array<int, 3> kCompared = {kTeCall, kKernel, kHook};

}  // namespace

int SourceIndex(v1::Source source) {
  switch (source) {
    case v1::KERNEL:
      return kKernel;
    case v1::TE_CALL:
      return kTeCall;
    case v1::PYTHON_HOOK:
      return kHook;
    default:
      return kOther;
  }
}

uint32_t ProbeBit(std::string_view name) {
  const std::optional<Probe> probe = ParseProbe(name);
  return probe ? ProbeBit(*probe) : 0;
}

uint64_t HookUnfused(std::string_view detail, uint64_t count) {
  constexpr std::string_view kKey = " unfused=";
  const size_t at = detail.find(kKey);
  if (at == std::string_view::npos) return 0;
  uint64_t u = 0;
  const char* begin = detail.data() + at + kKey.size();
  const auto [end, ec] = std::from_chars(begin, detail.data() + detail.size(), u);
  if (ec != std::errc() || end == begin) return 0;
  return std::min(u, count);
}

uint64_t SatAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint32_t Sat32(uint64_t v) {
  return v > std::numeric_limits<uint32_t>::max() ? std::numeric_limits<uint32_t>::max()
                                                  : static_cast<uint32_t>(v);
}

void ProbeTallies::Count(v1::Source source, int dir, uint64_t n, std::string_view detail) {
  const int src = SourceIndex(source);
  counted_by[src][dir] = SatAdd(counted_by[src][dir], n);
  if (src == kHook) unfused[dir] = SatAdd(unfused[dir], HookUnfused(detail, n));
}

void ProbeTallies::CrossCheck(v1::Source source, int dir, uint64_t n) {
  const int src = SourceIndex(source);
  cross_by[src][dir] = SatAdd(cross_by[src][dir], n);
}

void ProbeTallies::Add(const ProbeTallies& other) {
  for (int src = 0; src < kSources; ++src) {
    for (int dir : {0, 1}) {
      counted_by[src][dir] = SatAdd(counted_by[src][dir], other.counted_by[src][dir]);
      cross_by[src][dir] = SatAdd(cross_by[src][dir], other.cross_by[src][dir]);
    }
  }
  for (int dir : {0, 1}) unfused[dir] = SatAdd(unfused[dir], other.unfused[dir]);
}

bool ProbeTallies::Any() const {
  for (int src = 0; src < kSources; ++src) {
    for (int dir : {0, 1}) {
      if (counted_by[src][dir] > 0 || cross_by[src][dir] > 0) return true;
    }
  }
  return false;
}

void ProbeTallies::WriteTo(v1::SourceTallies* by) const {
  for (int src = 0; src < kSources; ++src) {
    const auto& c = counted_by[src];
    const auto& x = cross_by[src];
    if (c[0] == 0 && c[1] == 0 && x[0] == 0 && x[1] == 0) continue;
    v1::ProbeTally* t = src == kKernel   ? by->mutable_kernel()
                        : src == kTeCall ? by->mutable_te_call()
                        : src == kHook   ? by->mutable_python_hook()
                                         : by->mutable_other();
    t->set_forward(Sat32(c[0]));
    t->set_backward(Sat32(c[1]));
    t->set_crosscheck_forward(Sat32(x[0]));
    t->set_crosscheck_backward(Sat32(x[1]));
    if (src == kHook) {
      t->set_unfused_forward(Sat32(unfused[0]));
      t->set_unfused_backward(Sat32(unfused[1]));
    }
  }
}

std::string ProbeTallies::Disagreement(uint32_t compared, int dir) const {
  std::string line;
  bool differ = false;
  uint64_t first = 0;
  int n = 0;
  for (int src : kCompared) {
    if ((compared & ProbeBit(kSourceProbe[src])) == 0) continue;
    uint64_t seen = SatAdd(counted_by[src][dir], cross_by[src][dir]);
    if (src == kHook) seen -= std::min(seen, unfused[dir]);
    if (n++ == 0) first = seen;
    differ = differ || seen != first;
    if (!line.empty()) line += ", ";
    line += ProbeName(kSourceProbe[src]);
    line += ' ';
    line += std::to_string(seen);
  }
  return n < 2 || !differ ? std::string() : line;
}

uint32_t ActiveProbes::Set(const google::protobuf::RepeatedPtrField<std::string>& probes,
                           v1::Recording* rec) {
  constexpr size_t kMaxProbeNames = 16;
  std::vector<std::string> now;
  uint32_t bits = 0;
  for (const std::string& p : probes) {
    if (now.size() == kMaxProbeNames) break;
    std::string name = Printable(p, 32);
    if (const std::optional<Probe> probe = ParseProbe(name)) name = ProbeName(*probe);
    if (std::find(now.begin(), now.end(), name) != now.end()) continue;
    bits |= ProbeBit(name);
    now.push_back(std::move(name));
  }
  auto listed = [](const auto& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const std::string& name : now) {
    if (!listed(rec->probes(), name) && rec->probes_size() < static_cast<int>(kMaxProbeNames)) {
      rec->add_probes(name);
    }
  }
  for (const std::string& name : names_) {
    if (!listed(now, name) && !listed(rec->released(), name) &&
        rec->released_size() < static_cast<int>(kMaxProbeNames)) {
      rec->add_released(name);
    }
  }
  names_ = std::move(now);
  return bits;
}

}  // namespace fp8audit::reports
