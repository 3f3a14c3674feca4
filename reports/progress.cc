#include "reports/progress.h"

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "reports/output.h"

namespace fp8audit::reports {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kTerminalFirstNs = 200 * kMs;  // a quicker read draws nothing
constexpr uint64_t kTerminalPeriodNs = 100 * kMs;
constexpr uint64_t kLinesPeriodNs = 1000 * kMs;

std::string Format(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

std::string Seconds(double s) {
  if (s < 10) return Format("%.1f s", s);
  if (s < 120) return Format("%.0f s", s);
  return Format("%.0f min", s / 60);
}

size_t StderrColumns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

}  // namespace

ProgressMode ChooseProgressMode(std::optional<bool> flag, bool tty, const char* term) {
  const bool redraws = tty && (term == nullptr || std::strcmp(term, "dumb") != 0);
  if (!flag.has_value()) return redraws ? ProgressMode::kTerminal : ProgressMode::kOff;
  if (!*flag) return ProgressMode::kOff;
  return redraws ? ProgressMode::kTerminal : ProgressMode::kLines;
}

ProgressMode ProgressModeForStderr(std::optional<bool> flag) {
  return ChooseProgressMode(flag, ::isatty(STDERR_FILENO) == 1, std::getenv("TERM"));
}

std::vector<uint64_t> FileSizes(const std::vector<std::string>& files) {
  std::vector<uint64_t> sizes;
  sizes.reserve(files.size());
  for (const std::string& f : files) {
    struct stat st {};
    sizes.push_back(
        ::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0);
  }
  return sizes;
}

ReadProgress::ReadProgress(std::string label, std::vector<uint64_t> sizes, ProgressMode mode,
                           Sink sink, Clock clock)
    : label_(std::move(label)),
      sizes_(std::move(sizes)),
      mode_(mode),
      sink_(std::move(sink)),
      clock_(std::move(clock)) {
  if (!sink_) {
    columns_ = mode_ == ProgressMode::kTerminal ? StderrColumns() : 0;
    sink_ = [](std::string_view s) { WriteAll(STDERR_FILENO, std::string(s)); };
  }
  if (!clock_) {
    clock_ = [] {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    };
  }
  for (uint64_t s : sizes_) total_ += s;
  start_ns_ = clock_();
}

ReadProgress::~ReadProgress() { Finish(); }

std::string ReadProgress::Bytes(double bytes) {
  if (bytes < 1024) return Format("%.0f B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  bytes /= 1024;
  while (bytes >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return Format("%.1f ", bytes) + kUnits[unit];
}

void ReadProgress::Update(size_t file, uint64_t bytes, bool done) {
  if (mode_ == ProgressMode::kOff || finished_) return;
  const uint64_t size = file < sizes_.size() ? sizes_[file] : 0;
  if (done) {
    if (bytes > size) total_ += bytes - size;
    done_bytes_ += std::max(bytes, size);
    current_ = 0;
    current_extra_ = 0;
    ++files_done_;
  } else {
    current_ = bytes;
    current_extra_ = bytes > size ? bytes - size : 0;
  }
  const uint64_t now = clock_();
  const uint64_t since = now - (drawn_ ? last_draw_ns_ : start_ns_);
  if (mode_ == ProgressMode::kTerminal) {
    if (since < (drawn_ ? kTerminalPeriodNs : kTerminalFirstNs)) return;
  } else if (since < kLinesPeriodNs) {
    return;
  }
  Draw(now);
}

std::string ReadProgress::Line(uint64_t now) const {
  const uint64_t read = done_bytes_ + current_;
  const uint64_t total = std::max(total_ + current_extra_, read);
  const uint64_t percent = total == 0 ? 100 : read * 100 / total;
  std::string line = label_ + ": " + std::to_string(files_done_) + "/" +
                     std::to_string(sizes_.size()) + " traces, " + Bytes(read) + " of " +
                     Bytes(total) + " (" + std::to_string(percent) + "%)";
  const double seconds = static_cast<double>(now - start_ns_) / 1e9;
  if (seconds > 0 && read > 0) {
    const double rate = static_cast<double>(read) / seconds;
    line += ", " + Bytes(rate) + "/s";
    if (read < total) line += ", " + Seconds(static_cast<double>(total - read) / rate) + " left";
  }
  return line;
}

void ReadProgress::Draw(uint64_t now) {
  std::string line = Line(now);
  drawn_ = true;
  last_draw_ns_ = now;
  if (mode_ == ProgressMode::kTerminal) {
    // A line longer than the terminal would wrap, and \r would not return to its start.
    if (columns_ > 1 && line.size() >= columns_) line.resize(columns_ - 1);
    sink_("\r" + line + "\x1b[K");
  } else {
    sink_(line + "\n");
  }
}

void ReadProgress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::kTerminal && drawn_) {
    sink_("\r\x1b[K");
  } else if (mode_ == ProgressMode::kLines) {
    const uint64_t now = clock_();
    const double seconds = static_cast<double>(now - start_ns_) / 1e9;
    const uint64_t read = done_bytes_ + current_;
    std::string line = label_ + ": read " + std::to_string(sizes_.size()) +
                       (sizes_.size() == 1 ? " trace, " : " traces, ") + Bytes(read) + " in " +
                       Seconds(seconds);
    if (seconds > 0) line += " (" + Bytes(static_cast<double>(read) / seconds) + "/s)";
    sink_(line + "\n");
  }
}

}  // namespace fp8audit::reports
