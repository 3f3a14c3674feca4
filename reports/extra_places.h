// Where a trace's extra updates happened, and what each did (issue 35: a per-module table of
// extra updates): the Auditor hands it each update beyond the expected ones with its place and
// whether a module ran since the previous update of its direction; it keeps per-place counts in
// bounded memory and writes them, most first, as RankReport.extra_updates_at. Renderers only
// format them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// What an extra update did to the FP8 state, as far as a trace can tell without reading tensors.
enum class Effect {
  kHarmful,  // a module ran in its direction since the previous update of it: the amaxes it
             // wrote moved into the history, a step early
  kWasted,   // the trace sees that direction's modules, and none ran since: it advanced nothing
  kUnknown,  // the trace does not see that direction's modules run (no module events)
};

// `module_ran`: a module ran in the update's direction since the previous update of it;
// `modules_visible`: the trace records that direction's module runs where this update happened
// (module markers, or the Python hook's recompute marks during a recompute).
Effect EffectOf(bool module_ran, bool modules_visible);

class ExtraPlaces {
 public:
  static constexpr size_t kMaxPlaces = 32;  // past them: one "(other places)" row
  static constexpr char kOtherPlaces[] = "(other places)";

  // `n` extra updates in direction `dir` (kFwd, kBwd) at `place`.
  void Add(const std::string& place, int dir, uint64_t n, bool in_recompute, Effect effect);
  // The places, most extra updates first (ties: first seen first), the other places last.
  void WriteTo(v1::RankReport* report) const;

 private:
  v1::ExtraUpdatesAt* Row(const std::string& place);

  std::vector<v1::ExtraUpdatesAt> rows_;  // in the order first seen
  std::unordered_map<std::string, size_t> index_;
  v1::ExtraUpdatesAt other_;
};

}  // namespace fp8audit::reports
