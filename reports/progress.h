// Progress of reading a set of traces, on standard error: bytes read of the total, files done,
// rate and time left. On a terminal one line is redrawn in place (at most ten times a second, the
// first after 200 ms, so a quick read shows nothing) and erased at the end; elsewhere, when asked
// for, whole lines about once a second and a closing summary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8audit::reports {

enum class ProgressMode { kOff, kTerminal, kLines };

// `flag`: --progress (true), --no-progress (false) or neither. Without a flag: a line redrawn on a
// terminal (`tty`, and TERM is not "dumb"), else nothing. --progress on something that cannot
// redraw a line writes whole lines.
ProgressMode ChooseProgressMode(std::optional<bool> flag, bool tty, const char* term);
// The same for standard error and this process's TERM.
ProgressMode ProgressModeForStderr(std::optional<bool> flag);

// The size of each file (0 for one that cannot be read), for ReadProgress.
std::vector<uint64_t> FileSizes(const std::vector<std::string>& files);

class ReadProgress {
 public:
  using Sink = std::function<void(std::string_view)>;
  using Clock = std::function<uint64_t()>;  // monotonic nanoseconds

  // `label` starts each line ("fp8audit report"); `sizes` are the files' sizes. The sink defaults
  // to standard error, the clock to the steady clock.
  ReadProgress(std::string label, std::vector<uint64_t> sizes, ProgressMode mode,
               Sink sink = nullptr, Clock clock = nullptr);
  ~ReadProgress();
  ReadProgress(const ReadProgress&) = delete;
  ReadProgress& operator=(const ReadProgress&) = delete;

  // TraceSetOptions::on_progress: `bytes` of file `file` read so far; `done` when it is read.
  void Update(size_t file, uint64_t bytes, bool done);
  // Erases the terminal line, or writes the summary line. Called again (or by the destructor):
  // nothing.
  void Finish();

  // "2.0 MiB", "750 B".
  static std::string Bytes(double bytes);

 private:
  std::string Line(uint64_t now) const;
  void Draw(uint64_t now);

  std::string label_;
  std::vector<uint64_t> sizes_;
  ProgressMode mode_;
  Sink sink_;
  Clock clock_;
  uint64_t start_ns_ = 0;
  uint64_t last_draw_ns_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
  uint64_t total_ = 0;          // sum of sizes_, grown when a file is read past its size
  uint64_t done_bytes_ = 0;     // of the files done
  uint64_t current_ = 0;        // of the file being read
  uint64_t current_extra_ = 0;  // what the file being read has grown by since its size was taken
  size_t files_done_ = 0;
  size_t columns_ = 0;  // the terminal's width, when known: longer lines are cut
};

}  // namespace fp8audit::reports
