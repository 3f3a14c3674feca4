#include "cli/heartbeat.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "reports/progress.h"

namespace fp8audit::cli {

bool HeartbeatWanted(double interval_s, int quiet, bool stderr_tty) {
  return interval_s > 0 && quiet == 0 && stderr_tty;
}

Recorded RecordedSince(const std::string& dir, const reports::TraceDirSnapshot& before,
                       const std::string& run_id) {
  std::vector<std::string> others;
  const std::vector<std::string> ours =
      reports::TracesOfRun(reports::TracesWrittenSince(dir, before), run_id, &others);
  Recorded recorded;
  recorded.traces = ours.size();
  for (const uint64_t size : reports::FileSizes(ours)) recorded.bytes += size;
  return recorded;
}

namespace {

std::string Elapsed(uint64_t ns) {
  const uint64_t s = ns / 1000000000;
  char text[48];
  if (s >= 3600) {
    std::snprintf(
        text, sizeof text, "%lluh %02llum %02llus", static_cast<unsigned long long>(s / 3600),
        static_cast<unsigned long long>(s / 60 % 60), static_cast<unsigned long long>(s % 60));
  } else if (s >= 60) {
    std::snprintf(text, sizeof text, "%llum %02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(text, sizeof text, "%llus", static_cast<unsigned long long>(s));
  }
  return text;
}

}  // namespace

std::string HeartbeatLine(uint64_t elapsed_ns, const Recorded& now,
                          const std::optional<Recorded>& last) {
  std::string line = Elapsed(elapsed_ns) + " elapsed, ";
  if (now.traces == 0) return line + "no trace written yet";
  line += std::to_string(now.traces) + (now.traces == 1 ? " trace" : " traces") + " so far (" +
          reports::ReadProgress::Bytes(static_cast<double>(now.bytes));
  if (last.has_value() && now.bytes > last->bytes) {
    line += ", +" + reports::ReadProgress::Bytes(static_cast<double>(now.bytes - last->bytes)) +
            " since the last line";
  }
  return line + ")";
}

Heartbeat::Heartbeat(Clock clock, Probe probe, Sink sink)
    : clock_(std::move(clock)),
      probe_(std::move(probe)),
      sink_(std::move(sink)),
      start_ns_(clock_()) {}

void Heartbeat::Beat() {
  const Recorded now = probe_();
  sink_(HeartbeatLine(clock_() - start_ns_, now, last_));
  last_ = now;
}

}  // namespace fp8audit::cli
