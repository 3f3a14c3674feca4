#include "reports/trace_runs.h"

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <unordered_set>

#include "proto/trace_io.h"
#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

constexpr size_t kRunsNamed = 4;  // runs listed in a note or an error; the rest are counted

std::string Utc(uint64_t unix_ns) {
  if (unix_ns == 0) return "start unknown";
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000u);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[40];
  std::strftime(text, sizeof text, "started %Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

std::string Named(const TraceRun& run) {
  return run.id.empty() ? "traces without a run id" : Printable(run.id, 80);
}

// "A (…), B (…) and 2 more": the runs other than `skip`, newest first.
std::string List(const std::vector<TraceRun>& runs, const TraceRun* skip) {
  std::string text;
  size_t listed = 0, left = 0;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    if (&*it == skip) continue;
    if (listed == kRunsNamed) {
      ++left;
      continue;
    }
    text += (listed++ == 0 ? "" : "; ") + DescribeRun(*it);
  }
  if (left > 0) text += "; and " + std::to_string(left) + " more";
  return text;
}

}  // namespace

std::string DescribeRun(const TraceRun& run) {
  return Named(run) + " (" + Utc(run.start_unix_ns) + ", " +
         Plural(run.files.size(), "trace", "traces") + ")";
}

std::vector<TraceRun> GroupByRun(const std::vector<std::string>& files,
                                 std::vector<std::string>* unknown) {
  google::protobuf::LogSilencer quiet;
  std::map<std::string, size_t> index;
  std::vector<TraceRun> runs;
  for (const std::string& path : files) {
    std::string error;
    auto reader = TraceFileReader::Open(path, &error);
    v1::TraceRecord record;
    if (reader == nullptr || reader->Next(&record) != TraceFileReader::Status::kRecord ||
        !record.has_header()) {
      unknown->push_back(path);
      continue;
    }
    const v1::TraceHeader& h = record.header();
    auto [it, added] = index.emplace(h.run_id(), runs.size());
    if (added) runs.push_back(TraceRun{h.run_id(), h.start_unix_ns(), {}});
    TraceRun& run = runs[it->second];
    if (h.start_unix_ns() != 0 &&
        (run.start_unix_ns == 0 || h.start_unix_ns() < run.start_unix_ns)) {
      run.start_unix_ns = h.start_unix_ns();
    }
    run.files.push_back(path);
  }
  std::stable_sort(runs.begin(), runs.end(), [](const TraceRun& a, const TraceRun& b) {
    return a.start_unix_ns < b.start_unix_ns;
  });
  return runs;
}

bool SelectRun(const std::vector<std::string>& files, const std::string& select,
               std::vector<std::string>* chosen, std::vector<std::string>* notes,
               std::string* error) {
  if (select == "all") {
    *chosen = files;
    return true;
  }
  std::vector<std::string> unknown;
  const std::vector<TraceRun> runs = GroupByRun(files, &unknown);
  const TraceRun* pick = nullptr;
  if (select == "latest") {
    if (runs.size() <= 1) {
      *chosen = files;
      return true;
    }
    pick = &runs.back();
    notes->push_back("these traces are of " + std::to_string(runs.size()) +
                     " runs: reading the latest, " + DescribeRun(*pick) + "; the others: " +
                     List(runs, pick) + " (choose one with --run ID, every trace with --run all)");
  } else {
    size_t matches = 0;
    for (const TraceRun& run : runs) {
      if (run.id == select) {
        pick = &run;
        matches = 1;
        break;
      }
      if (!select.empty() && run.id.starts_with(select)) {
        pick = &run;
        ++matches;
      }
    }
    if (matches != 1) {
      *error = (matches == 0 ? "no run " : "more than one run starts with ") +
               Printable(select, 80) + " in these traces; their runs: " +
               (runs.empty() ? std::string("none (no trace has a readable header)")
                             : List(runs, nullptr));
      return false;
    }
  }
  std::unordered_set<std::string> keep(pick->files.begin(), pick->files.end());
  keep.insert(unknown.begin(), unknown.end());
  chosen->clear();
  for (const std::string& path : files) {
    if (keep.contains(path)) chosen->push_back(path);
  }
  return true;
}

}  // namespace fp8audit::reports
