// Which `fp8audit run` wrote each trace (TraceHeader.run_id), and the traces of one run chosen
// from a folder that holds several: `report` and `check` read the latest run unless told
// otherwise (--run), so two runs into one --out folder are never one job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8audit::reports {

// The traces of one run, in the order given. `id` is empty for traces that record none (written
// outside `fp8audit run`, or by an agent before run ids); `start_unix_ns`: the earliest header's.
struct TraceRun {
  std::string id;
  uint64_t start_unix_ns = 0;
  std::vector<std::string> files;
};

// `files` grouped by run, oldest first. Files whose header cannot be read belong to no run:
// they go to `unknown` (their audit says why).
std::vector<TraceRun> GroupByRun(const std::vector<std::string>& files,
                                 std::vector<std::string>* unknown);

// Chooses from `files` by `select`: "latest" (the run started last), "all", or a run id (or a
// prefix of only one). Files of no known run are kept in any choice. `notes`: one line saying
// which run was read where there were several. False with `error` (one line naming the runs
// there are) where `select` names no run or several.
bool SelectRun(const std::vector<std::string>& files, const std::string& select,
               std::vector<std::string>* chosen, std::vector<std::string>* notes,
               std::string* error);

// One run as a reader sees it: "ID (started 2026-12-03 13:40:07 UTC, 2 traces)".
std::string DescribeRun(const TraceRun& run);

}  // namespace fp8audit::reports
