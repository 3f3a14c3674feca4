// `fp8audit run`'s heartbeat: while the command runs and standard error is a terminal, one line
// every --heartbeat seconds (default 60) with the time elapsed and what the agent has written so
// far: this run's traces and their size. Whole lines, never redrawn in place: the job's own
// output shares the terminal and stays intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "reports/trace_paths.h"

namespace fp8audit::cli {

inline constexpr double kDefaultHeartbeatSeconds = 60;

// Whether `run` beats: an interval above 0, not --quiet, and standard error a terminal.
bool HeartbeatWanted(double interval_s, int quiet, bool stderr_tty);

// What the agent has written so far.
struct Recorded {
  size_t traces = 0;
  uint64_t bytes = 0;
};

// This run's traces in `dir`: written since `before`, their headers naming `run_id` (or none yet).
Recorded RecordedSince(const std::string& dir, const reports::TraceDirSnapshot& before,
                       const std::string& run_id);

// "2m 00s elapsed, 2 traces so far (3.1 MiB, +1.2 MiB since the last line)"; `last`: what the
// previous line counted (none for the first).
std::string HeartbeatLine(uint64_t elapsed_ns, const Recorded& now,
                          const std::optional<Recorded>& last);

class Heartbeat {
 public:
  using Clock = std::function<uint64_t()>;  // monotonic nanoseconds
  using Probe = std::function<Recorded()>;
  using Sink = std::function<void(const std::string&)>;

  // Elapsed time counts from here.
  Heartbeat(Clock clock, Probe probe, Sink sink);
  // Writes one line to the sink.
  void Beat();

 private:
  Clock clock_;
  Probe probe_;
  Sink sink_;
  uint64_t start_ns_;
  std::optional<Recorded> last_;
};

}  // namespace fp8audit::cli
