// The HTML report's per-rank graphics, aggregated for long traces: microbatches grouped into
// columns (Bucket), the updates chart with its axes (titles, round ticks, microbatch ranges) and
// its legend. render_html.cc lays out the page around them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports::html {

namespace v1 = ::fp8audit::v1;

// One timeline or chart column: a run of consecutive microbatch indices.
struct Bucket {
  uint32_t first = 0;
  uint32_t last = 0;
  uint32_t rows = 0;  // microbatch rows the report kept in this range
  uint32_t failing = 0;
  uint32_t judged = 0;  // rows with a verdict (none where nothing was audited)
  uint32_t max_f = 0, max_b = 0;
  uint32_t min_f = UINT32_MAX, min_b = UINT32_MAX;
  uint32_t exp_f = 0, exp_b = 0;  // the largest expectations in the range
  bool dup_f = false, dup_b = false, miss_f = false, miss_b = false;
  const v1::MicrobatchResult* first_failing = nullptr;
  uint32_t differing = 0;  // microbatches in which this rank disagrees with most ranks
};

// `columns` columns over microbatches 0..span-1: each `per` microbatches from 0 (the last one
// shorter), or where `per` is 0 the span split evenly.
std::vector<Bucket> MakeBuckets(const v1::RankReport& r, uint64_t span, uint32_t columns,
                                uint64_t per = 0);

// Layout shared by the timeline and the chart: a label margin, then the columns.
inline constexpr double kLeft = 44;
inline constexpr double kWidth = 1000;

// SVG coordinates with at most two decimals, trailing zeros dropped.
std::string Coord(double v);
// "microbatch 7", "microbatches 0–99".
std::string RangeText(uint64_t first, uint64_t last);

// How the chart groups the microbatches: up to kMaxBars microbatches a bar each; up to
// kMaxBars round bins (10, 20, 50, ... microbatches) a bar each while there are at most
// kBinnedUpTo microbatches; past that the timeline's columns, drawn as step lines and bands.
inline constexpr uint32_t kMaxBars = 100;
inline constexpr uint64_t kBinnedUpTo = 2000;
struct ChartBins {
  uint32_t columns = 0;
  uint64_t per = 0;  // microbatches per column (0: the span split evenly, the timeline's)
  bool bars = false;
};
ChartBins ChooseChartBins(uint64_t span, uint32_t timeline_columns);

// The updates chart of one rank: a note saying how columns are made, the legend, and the SVG.
// `link` gives the page anchor of a failing microbatch listed below ("" when it is not).
void Chart(const std::vector<Bucket>& buckets, const ChartBins& bins, uint32_t y_max,
           const std::function<std::string(uint32_t)>& link, std::string* out);

}  // namespace fp8audit::reports::html
