#include "reports/html_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fp8audit::reports::html {
namespace {

std::string Num(uint64_t n) { return std::to_string(n); }

// The smallest of 1, 2, 5, 10, 20, 50, ... that is at least `raw` (and at least 1).
uint64_t RoundUp125(double raw) {
  uint64_t step = 1;
  while (true) {
    for (uint64_t m : {1, 2, 5}) {
      if (static_cast<double>(step * m) >= raw) return step * m;
    }
    step *= 10;
  }
}

// "0–99" (or "7" for one microbatch): a column's range on the x axis.
std::string ShortRange(const Bucket& b) {
  return b.first == b.last ? Num(b.first) : Num(b.first) + "\xe2\x80\x93" + Num(b.last);
}

}  // namespace

std::string Coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string RangeText(uint64_t first, uint64_t last) {
  return first == last ? "microbatch " + Num(first)
                       : "microbatches " + Num(first) + "\xe2\x80\x93" + Num(last);
}

std::vector<Bucket> MakeBuckets(const v1::RankReport& r, uint64_t span, uint32_t columns,
                                uint64_t per) {
  std::vector<Bucket> buckets(columns);
  auto column_of = [&](uint64_t index) { return per != 0 ? index / per : index * columns / span; };
  for (uint32_t b = 0; b < columns; ++b) {
    if (per != 0) {
      buckets[b].first = static_cast<uint32_t>(b * per);
      buckets[b].last = static_cast<uint32_t>(std::min<uint64_t>((b + 1) * per, span) - 1);
    } else {
      buckets[b].first = static_cast<uint32_t>((b * span + columns - 1) / columns);
      buckets[b].last = static_cast<uint32_t>(((b + 1) * span + columns - 1) / columns - 1);
    }
  }
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    if (row.index() >= span) continue;
    Bucket& b = buckets[column_of(row.index())];
    ++b.rows;
    b.max_f = std::max(b.max_f, row.forward_updates());
    b.max_b = std::max(b.max_b, row.backward_updates());
    b.min_f = std::min(b.min_f, row.forward_updates());
    b.min_b = std::min(b.min_b, row.backward_updates());
    b.exp_f = std::max(b.exp_f, row.expected_forward());
    b.exp_b = std::max(b.exp_b, row.expected_backward());
    b.dup_f = b.dup_f || row.forward_updates() > row.expected_forward();
    b.dup_b = b.dup_b || row.backward_updates() > row.expected_backward();
    b.miss_f = b.miss_f || row.forward_updates() < row.expected_forward();
    b.miss_b = b.miss_b || row.backward_updates() < row.expected_backward();
    if (row.verdict() != v1::VERDICT_UNSPECIFIED) ++b.judged;
    if (row.verdict() == v1::FAIL) {
      if (b.first_failing == nullptr) b.first_failing = &row;
      ++b.failing;
    }
  }
  // Where the trace differs from most ranks: each range's microbatches, column by column.
  for (const v1::MicrobatchRange& d : r.standing().differing()) {
    if (d.first() >= span || d.last() < d.first()) continue;
    const uint64_t last = std::min<uint64_t>(d.last(), span - 1);
    for (uint64_t b = column_of(d.first()); b <= column_of(last); ++b) {
      const uint64_t from = std::max<uint64_t>(d.first(), buckets[b].first);
      const uint64_t to = std::min<uint64_t>(last, buckets[b].last);
      if (to >= from) buckets[b].differing += static_cast<uint32_t>(to - from + 1);
    }
  }
  return buckets;
}

ChartBins ChooseChartBins(uint64_t span, uint32_t timeline_columns) {
  ChartBins bins;
  if (span <= kMaxBars) {
    bins.per = 1;
  } else if (span <= kBinnedUpTo) {
    bins.per = RoundUp125(static_cast<double>(span) / kMaxBars);
  }
  if (bins.per != 0) {
    bins.columns = static_cast<uint32_t>((span + bins.per - 1) / bins.per);
    bins.bars = true;
  } else {
    bins.columns = timeline_columns;
  }
  return bins;
}

void Chart(const std::vector<Bucket>& buckets, const ChartBins& bins, uint32_t y_max,
           const std::function<std::string(uint32_t)>& link, std::string* out) {
  // The plot from kTop to kBottom; below it the failing row, the x labels and the x title.
  constexpr double kTop = 8, kBottom = 104, kFailTop = 107, kHeight = 150;
  const size_t n = buckets.size();
  const double w = kWidth / static_cast<double>(std::max<size_t>(1, n));
  // The y axis: round steps (1, 2, 5, 10, ...), about four of them, up to a round top.
  const uint64_t step = RoundUp125(std::max<uint32_t>(1, y_max) / 4.0);
  const uint64_t top = (std::max<uint32_t>(1, y_max) + step - 1) / step * step;
  const double scale = (kBottom - kTop) / static_cast<double>(top);
  auto y = [&](uint32_t v) { return kBottom - scale * v; };
  const uint64_t per_max = n == 0 ? 0 : buckets.front().last - buckets.front().first + 1;

  // What a column is, said once, apart from the legend's series.
  *out += "<p class=\"note chart-note\">";
  if (per_max <= 1) {
    *out += "One bar per microbatch: its forward (left) and backward (right) updates.";
  } else if (bins.bars) {
    *out += "Microbatches in bins of " + Num(bins.per) +
            ", labelled with their ranges; each bar is the most updates of any microbatch in "
            "its bin (forward left, backward right).";
  } else {
    *out += "Microbatches in columns of up to " + Num(per_max) +
            ", as in the timeline; the lines are the most updates of any microbatch in each "
            "column, the bands reach down to the fewest.";
  }
  *out += " Failing microbatches are marked in red under the axis";
  *out += bins.bars ? ", each mark linking to the first of them listed below.</p>\n"
                    : "; the timeline's columns link to them.</p>\n";
  *out +=
      "<p class=\"note legend\"><span class=\"sw\" style=\"background:#1565c0\"></span>forward "
      "updates<span class=\"sw\" style=\"background:#ef6c00\"></span>backward updates"
      "<span class=\"sw\" style=\"border-top:2px dashed #0d47a1;height:0\"></span>expected "
      "forward<span class=\"sw\" style=\"border-top:2px dashed #e65100;height:0\"></span>expected "
      "backward<span class=\"sw\" style=\"background:#c62828\"></span>failing microbatches</p>\n";

  *out += "<svg class=\"chart\" role=\"img\" viewBox=\"0 0 " + Coord(kLeft + kWidth) + " " +
          Coord(kHeight) + "\" aria-label=\"FP8 state updates per microbatch\">";
  // Grid lines and y labels at each step; the axes.
  std::string grid;
  for (uint64_t v = 0; v <= top; v += step) {
    const double ty = y(static_cast<uint32_t>(v));
    if (v > 0) grid += "M" + Coord(kLeft) + " " + Coord(ty) + "H" + Coord(kLeft + kWidth);
    *out += "<text class=\"yt\" x=\"" + Coord(kLeft - 4) + "\" y=\"" + Coord(ty + 3) +
            "\" text-anchor=\"end\">" + Num(v) + "</text>";
  }
  if (!grid.empty()) *out += "<path class=\"grid\" d=\"" + grid + "\"/>";
  *out += "<path class=\"ax\" d=\"M" + Coord(kLeft) + " " + Coord(kTop) + "V" + Coord(kBottom) +
          "H" + Coord(kLeft + kWidth) + "\"/>";
  *out += "<text class=\"axis-title\" transform=\"rotate(-90)\" x=\"" +
          Coord(-(kTop + kBottom) / 2) + "\" y=\"11\" text-anchor=\"middle\">updates</text>";
  const std::string x_title = per_max <= 1 ? "microbatch"
                              : bins.bars  ? "microbatch (bins of " + Num(bins.per) + ")"
                                           : "microbatch (columns of up to " + Num(per_max) + ")";
  *out += "<text class=\"axis-title\" x=\"" + Coord(kLeft + kWidth / 2) + "\" y=\"" +
          Coord(kHeight - 4) + "\" text-anchor=\"middle\">" + x_title + "</text>";

  // X labels: every microbatch while few, else every k-th column (k round), as ranges.
  const size_t max_labels = per_max <= 1 ? 25 : 10;
  const size_t every = RoundUp125(static_cast<double>(n) / static_cast<double>(max_labels));
  std::string ticks;
  for (size_t i = 0; i < n; i += every) {
    const double cx = kLeft + (static_cast<double>(i) + 0.5) * w;
    ticks += "M" + Coord(cx) + " " + Coord(kBottom) + "v3";
    *out += "<text class=\"xt\" x=\"" + Coord(cx) + "\" y=\"" + Coord(kFailTop + 18) +
            "\" text-anchor=\"middle\">" + ShortRange(buckets[i]) + "</text>";
  }
  if (!ticks.empty()) *out += "<path class=\"ax\" d=\"" + ticks + "\"/>";

  std::string fwd, bwd;
  const double bar = w * 0.42;
  for (size_t i = 0; bins.bars && i < n; ++i) {
    const Bucket& b = buckets[i];
    if (b.rows == 0) continue;
    const double x = kLeft + static_cast<double>(i) * w;
    if (b.max_f > 0) {
      fwd += "M" + Coord(x + w * 0.06) + " " + Coord(kBottom) + "V" + Coord(y(b.max_f)) + "h" +
             Coord(bar) + "V" + Coord(kBottom) + "Z";
    }
    if (b.max_b > 0) {
      bwd += "M" + Coord(x + w * 0.52) + " " + Coord(kBottom) + "V" + Coord(y(b.max_b)) + "h" +
             Coord(bar) + "V" + Coord(kBottom) + "Z";
    }
  }
  // A step line through one value per column; columns without rows break it.
  auto steps = [&](uint32_t Bucket::*field) {
    std::string d;
    bool open = false;
    uint32_t at = 0;
    for (size_t i = 0; i <= n; ++i) {
      const double x = kLeft + static_cast<double>(i) * w;
      const bool has = i < n && buckets[i].rows > 0;
      if (open && (!has || buckets[i].*field != at)) d += "H" + Coord(x);
      if (!has) {
        open = false;
        continue;
      }
      const uint32_t v = buckets[i].*field;
      if (!open) {
        d += "M" + Coord(x) + " " + Coord(y(v));
      } else if (v != at) {
        d += "V" + Coord(y(v));
      }
      open = true;
      at = v;
    }
    return d;
  };
  // The range from the fewest to the most updates in each column, one rectangle per run of
  // columns with the same range.
  auto band = [&](uint32_t Bucket::*lo, uint32_t Bucket::*hi) {
    std::string d;
    size_t i = 0;
    while (i < n) {
      if (buckets[i].rows == 0) {
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < n && buckets[j].rows > 0 && buckets[j].*lo == buckets[i].*lo &&
             buckets[j].*hi == buckets[i].*hi) {
        ++j;
      }
      // A column whose microbatches all agree still gets a visible band.
      const double band_top = y(buckets[i].*hi) - 1;
      const double band_bottom = y(buckets[i].*lo) + 1;
      d += "M" + Coord(kLeft + static_cast<double>(i) * w) + " " + Coord(band_top) + "H" +
           Coord(kLeft + static_cast<double>(j) * w) + "V" + Coord(band_bottom) + "H" +
           Coord(kLeft + static_cast<double>(i) * w) + "Z";
      i = j;
    }
    return d;
  };
  auto path = [&](const char* cls, const std::string& d, const char* title) {
    if (d.empty()) return;
    *out += "<path class=\"" + std::string(cls) + "\" d=\"" + d + "\"><title>" + title +
            "</title></path>";
  };
  if (bins.bars) {
    path("fb", fwd, "forward updates");
    path("bb", bwd, "backward updates");
  } else {
    path("fr", band(&Bucket::min_f, &Bucket::max_f), "forward updates (range in each column)");
    path("br", band(&Bucket::min_b, &Bucket::max_b), "backward updates (range in each column)");
    path("fl", steps(&Bucket::max_f), "forward updates (the most in each column)");
    path("bl", steps(&Bucket::max_b), "backward updates (the most in each column)");
  }
  path("ef", steps(&Bucket::exp_f), "expected forward");
  path("eb", steps(&Bucket::exp_b), "expected backward");

  // Failing microbatches under the axis. Bars: a mark per bin, linked, with the bin's counts;
  // columns: runs of failing columns merged into one shape.
  if (bins.bars) {
    for (size_t i = 0; i < n; ++i) {
      const Bucket& b = buckets[i];
      const double x = kLeft + static_cast<double>(i) * w;
      std::string title = RangeText(b.first, b.last);
      if (b.rows == 0) {
        title += ": none on this rank";
      } else {
        title += ": forward " + Num(b.min_f) + (b.min_f == b.max_f ? "" : "-" + Num(b.max_f)) +
                 ", backward " + Num(b.min_b) + (b.min_b == b.max_b ? "" : "-" + Num(b.max_b)) +
                 " (expected " + Num(b.exp_f) + "/" + Num(b.exp_b) + ")";
        if (b.failing > 0) title += "; " + Num(b.failing) + " failing";
      }
      std::string cell = "<g class=\"bin" + std::string(b.failing > 0 ? " fail" : "") +
                         "\" data-first=\"" + Num(b.first) + "\" data-last=\"" + Num(b.last) +
                         "\"><title>" + title + "</title><rect class=\"hit\" x=\"" + Coord(x) +
                         "\" y=\"" + Coord(kTop) + "\" width=\"" + Coord(w) + "\" height=\"" +
                         Coord(kFailTop + 5 - kTop) + "\"/>";
      if (b.failing > 0) {
        cell += "<rect class=\"fm\" x=\"" + Coord(x + w * 0.06) + "\" y=\"" + Coord(kFailTop) +
                "\" width=\"" + Coord(w * 0.88) + "\" height=\"5\"/>";
      }
      cell += "</g>";
      const std::string href = b.first_failing != nullptr ? link(b.first_failing->index()) : "";
      *out += href.empty() ? cell : "<a href=\"" + href + "\">" + cell + "</a>";
    }
  } else {
    std::string d;
    for (size_t i = 0; i < n;) {
      if (buckets[i].failing == 0) {
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < n && buckets[j].failing > 0) ++j;
      d += "M" + Coord(kLeft + static_cast<double>(i) * w) + " " + Coord(kFailTop) + "H" +
           Coord(kLeft + static_cast<double>(j) * w) + "v5H" +
           Coord(kLeft + static_cast<double>(i) * w) + "Z";
      i = j;
    }
    if (!d.empty()) *out += "<path class=\"fm\" d=\"" + d + "\"><title>failing</title></path>";
  }
  *out += "</svg>\n";
}

}  // namespace fp8audit::reports::html
