// A structural check of Chrome Trace Event JSON (the JSON Object Format) as Perfetto UI and
// chrome://tracing read it, shared by the renderer's tests and the fuzz target: required fields
// per phase, "ts" first in every event (older trace processors scan for it), metadata naming every
// process and thread, B/E balanced per track, and the slices of a track perfectly nested (what
// Perfetto displays; overlapping slices are not), timestamps taken in whole nanoseconds as
// Perfetto's JSON importer takes them (the renderer writes exact microseconds to 3 decimals).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fp8audit::testing {

using OrderedJson = nlohmann::ordered_json;

// The first problem found, or "" when there is none. `parsed` (if not null) gets the document.
inline std::string ChromeTraceProblem(const std::string& text, OrderedJson* parsed = nullptr) {
  OrderedJson doc = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return "not JSON";
  if (!doc.is_object() || doc.empty() || doc.begin().key() != "traceEvents" ||
      !doc["traceEvents"].is_array()) {
    return "not a JSON Object Format trace: traceEvents must be the first key, an array";
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "traceEvents" && key != "otherData" && key != "displayTimeUnit" &&
        key != "metadata") {
      return "top-level key " + key + " (Perfetto stops reading at an unknown key)";
    }
  }
  if (doc.contains("otherData") && !doc["otherData"].is_object()) return "otherData not an object";

  using Track = std::pair<uint64_t, uint64_t>;
  struct Interval {
    int64_t start;  // ns
    int64_t end;
    size_t order;
  };
  const auto ns = [](double micros) {  // saturating: a timestamp past 2^63 ns is the largest
    const double v = micros * 1000;
    return v >= 9.2e18 ? std::numeric_limits<int64_t>::max()
                       : static_cast<int64_t>(std::llround(v));
  };
  const auto add = [](int64_t a, int64_t b) {  // both >= 0, saturating
    return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max()
                                                       : a + b;
  };
  std::map<Track, std::vector<Interval>> slices;
  std::map<Track, std::vector<std::pair<int64_t, size_t>>> open;  // B awaiting its E
  std::map<Track, int64_t> last_be;
  std::set<uint64_t> pids, named_pids;
  std::set<Track> tracks, named_tracks;
  const auto& events = doc["traceEvents"];
  for (size_t n = 0; n < events.size(); ++n) {
    const auto& e = events[n];
    const std::string at = "event " + std::to_string(n) + ": ";
    if (!e.is_object()) return at + "not an object";
    if (e.empty() || e.begin().key() != "ts") return at + "\"ts\" is not its first key";
    if (!e["ts"].is_number() || e["ts"].get<double>() < 0) return at + "ts not a number >= 0";
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>().size() != 1) {
      return at + "no one-letter ph";
    }
    for (const char* id : {"pid", "tid"}) {
      if (!e.contains(id) || !e[id].is_number_unsigned() ||
          e[id].get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return at + id + " not an unsigned 32-bit integer";
      }
    }
    if (e.contains("args") && !e["args"].is_object()) return at + "args not an object";
    const char ph = e["ph"].get<std::string>()[0];
    if (ph != 'E' && (!e.contains("name") || !e["name"].is_string())) return at + "no name";
    const int64_t ts = ns(e["ts"].get<double>());
    const Track track{e["pid"].get<uint64_t>(), e["tid"].get<uint64_t>()};
    switch (ph) {
      case 'M': {
        const std::string name = e["name"];
        if (!e.contains("args") || !e["args"].is_object()) return at + "metadata without args";
        if (name == "process_name" || name == "thread_name" || name == "process_labels") {
          const char* key = name == "process_labels" ? "labels" : "name";
          if (!e["args"].contains(key) || !e["args"][key].is_string()) {
            return at + name + " without args." + key;
          }
          if (name == "process_name") named_pids.insert(track.first);
          if (name == "thread_name") named_tracks.insert(track);
        } else if (name == "process_sort_index" || name == "thread_sort_index") {
          if (!e["args"].contains("sort_index") || !e["args"]["sort_index"].is_number_integer()) {
            return at + name + " without an integer args.sort_index";
          }
        } else {
          return at + "unknown metadata " + name;
        }
        continue;
      }
      case 'X':
        if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
          return at + "complete event without dur >= 0";
        }
        slices[track].push_back({ts, add(ts, ns(e["dur"].get<double>())), n});
        break;
      case 'B':
      case 'E':
        if (last_be.count(track) != 0 && ts < last_be[track]) {
          return at + "B/E earlier than the one before it on its track";
        }
        last_be[track] = ts;
        if (ph == 'B') {
          open[track].push_back({ts, n});
        } else {
          if (open[track].empty()) return at + "E without a B on its track";
          slices[track].push_back({open[track].back().first, ts, open[track].back().second});
          open[track].pop_back();
        }
        break;
      case 'i':
      case 'I':
        if (!e.contains("s") || !e["s"].is_string() ||
            (e["s"] != "t" && e["s"] != "p" && e["s"] != "g")) {
          return at + "instant without scope s t, p or g";
        }
        break;
      default:
        return at + "phase " + std::string(1, ph) + " not expected";
    }
    pids.insert(track.first);
    tracks.insert(track);
  }
  for (const auto& [track, stack] : open) {
    if (!stack.empty()) {
      return "track " + std::to_string(track.second) + ": " + std::to_string(stack.size()) +
             " B without E";
    }
  }
  for (uint64_t pid : pids) {
    if (named_pids.count(pid) == 0) return "process " + std::to_string(pid) + " has no name";
  }
  for (const Track& t : tracks) {
    if (named_tracks.count(t) == 0) return "thread " + std::to_string(t.second) + " has no name";
  }
  for (auto& [track, list] : slices) {
    std::stable_sort(list.begin(), list.end(), [](const Interval& a, const Interval& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<Interval> stack;
    for (const Interval& s : list) {
      while (!stack.empty() && stack.back().end <= s.start) stack.pop_back();
      if (!stack.empty() && s.end > stack.back().end) {
        return "track " + std::to_string(track.second) + ": events " +
               std::to_string(stack.back().order) + " and " + std::to_string(s.order) +
               " overlap without nesting";
      }
      stack.push_back(s);
    }
  }
  if (parsed != nullptr) *parsed = std::move(doc);
  return "";
}

}  // namespace fp8audit::testing
