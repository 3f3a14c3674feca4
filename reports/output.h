// Writing a rendered report to a file.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fp8audit::reports {

// Writes `content` to `path` atomically: a temporary file in the same directory, then rename, so
// readers see the old file or the whole new one. Returns false and sets `error` ("PATH: reason").
bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error);

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

// Buffered output to a file written atomically (as WriteFileAtomically: nothing appears at `path`
// until Finish succeeds; a stream destroyed unfinished removes its temporary file) or to a file
// descriptor (not closed). Memory: one 1 MiB buffer.
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
  FileOutput(int fd, std::string name, std::string tmp);
  void Flush();

  int fd_;
  std::string name_;  // the path, or what the descriptor is ("standard output")
  std::string tmp_;   // the temporary file; empty for a descriptor
  std::string buffer_;
  int errno_ = 0;  // the first write error
  bool finished_ = false;
};

}  // namespace fp8audit::reports
