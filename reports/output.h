// Writing a rendered report to a file.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fp8audit::reports {

// How a file the user names for output is written. A regular file, a name not taken yet and a
// symbolic link to a regular file (or to nothing) are replaced atomically: a temporary file in the
// same directory, then rename, so readers see the old file or the whole new one (a link is
// replaced, its target left alone). A character device, FIFO or a link to one (/dev/stdout,
// /dev/null, a pipe) is written in place. A directory or a socket is refused.
enum class OutputTarget { kReplace, kInPlace };
// False and `error` ("PATH: reason") for a target that cannot be written.
bool ClassifyOutput(const std::string& path, OutputTarget* target, std::string* error);

// A new, empty temporary file beside `path` (its directory), with the mode a plain create would
// give (0666 less the umask); "" and `error` on failure.
std::string TemporaryBeside(const std::string& path, std::string* error);

// Writes `content` to `path` as ClassifyOutput says. Returns false and sets `error` ("PATH:
// reason") on any failure, a short or failed write (a full disk, /dev/full) included.
bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error);

// Whether `a` names the same file as `b` (both exist; links followed).
bool SameFile(const std::string& a, const std::string& b);

// Writes `content` to a file descriptor (all of it, retrying short writes). False on error.
bool WriteAll(int fd, std::string_view content);

// Where a renderer that writes while the traces are read sends its text.
class OutputStream {
 public:
  virtual ~OutputStream() = default;
  virtual void Write(std::string_view text) = 0;
};

// In memory (tests, small outputs).
class StringOutput final : public OutputStream {
 public:
  void Write(std::string_view text) override { text_.append(text); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Buffered output to a file written as WriteFileAtomically writes it (replaced: nothing appears at
// `path` until Finish succeeds; a stream destroyed unfinished removes its temporary file) or to a
// file descriptor (not closed). Memory: one 1 MiB buffer.
class FileOutput final : public OutputStream {
 public:
  static std::unique_ptr<FileOutput> Create(const std::string& path, std::string* error);
  static std::unique_ptr<FileOutput> ForFd(int fd, std::string name);
  ~FileOutput() override;
  FileOutput(const FileOutput&) = delete;
  FileOutput& operator=(const FileOutput&) = delete;

  void Write(std::string_view text) override;
  // Flushes, and for a file closes and renames it into place. False (and `error`, "NAME: reason")
  // when any write failed.
  bool Finish(std::string* error);

 private:
  FileOutput(int fd, std::string name, std::string tmp, bool owned);
  void Flush();

  int fd_;
  std::string name_;    // the path, or what the descriptor is ("standard output")
  std::string tmp_;     // the temporary file; empty for a descriptor or a file written in place
  bool owned_ = false;  // fd_ is closed by Finish (a file written in place)
  std::string buffer_;
  int errno_ = 0;  // the first write error
  bool finished_ = false;
};

}  // namespace fp8audit::reports
