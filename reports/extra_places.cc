#include "reports/extra_places.h"

#include <algorithm>

#include "reports/event_text.h"
#include "reports/probe_tally.h"
#include "reports/segmentation.h"

namespace fp8audit::reports {
namespace {

uint64_t Total(const v1::ExtraUpdatesAt& row) { return SatAdd(row.forward(), row.backward()); }

}  // namespace

Effect EffectOf(bool module_ran, bool modules_visible) {
  if (module_ran) return Effect::kHarmful;
  return modules_visible ? Effect::kWasted : Effect::kUnknown;
}

v1::ExtraUpdatesAt* ExtraPlaces::Row(const std::string& place) {
  if (const auto it = index_.find(place); it != index_.end()) return &rows_[it->second];
  if (rows_.size() == kMaxPlaces) {
    other_.set_place(kOtherPlaces);
    return &other_;
  }
  index_.emplace(place, rows_.size());
  rows_.emplace_back().set_place(Printable(place, 160));
  return &rows_.back();
}

void ExtraPlaces::Add(const std::string& place, int dir, uint64_t n, bool in_recompute,
                      Effect effect) {
  v1::ExtraUpdatesAt* row = Row(place);
  if (dir == kFwd) {
    row->set_forward(SatAdd(row->forward(), n));
  } else {
    row->set_backward(SatAdd(row->backward(), n));
  }
  if (in_recompute) row->set_in_recompute(SatAdd(row->in_recompute(), n));
  if (effect == Effect::kHarmful) row->set_harmful(SatAdd(row->harmful(), n));
  if (effect == Effect::kWasted) row->set_wasted(SatAdd(row->wasted(), n));
}

void ExtraPlaces::WriteTo(v1::RankReport* report) const {
  std::vector<const v1::ExtraUpdatesAt*> order;
  order.reserve(rows_.size());
  for (const v1::ExtraUpdatesAt& row : rows_) order.push_back(&row);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return Total(*a) > Total(*b); });
  for (const v1::ExtraUpdatesAt* row : order) *report->add_extra_updates_at() = *row;
  if (Total(other_) > 0) *report->add_extra_updates_at() = other_;
}

}  // namespace fp8audit::reports
