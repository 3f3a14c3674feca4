// Reading and writing .fp8trace files: length-delimited fp8audit.v1.TraceRecord messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fp8audit/trace.pb.h"

namespace fp8audit {

// Largest record a reader accepts; a size prefix above it marks the trace as damaged.
inline constexpr uint32_t kMaxTraceRecordBytes = 16u << 20;
// The newest TraceHeader.schema_version this reader understands; a newer trace is refused.
inline constexpr uint32_t kTraceSchemaVersion = 1;

// Appends one record, size-prefixed, to `out`.
void AppendRecord(const v1::TraceRecord& record, std::string* out);

// Writes records to a file. Not thread-safe; the agent serialises through its writer thread.
//
// Whole records only: each write puts its bytes at the end of what was written before; a write cut
// short (a full disk, the file size limit) is undone (the file cut back to the records before it)
// and fails, so a later write that succeeds follows a whole record and the caller may try the same
// bytes again. Only into its own file: the descriptor is moved high (fd_guard.h) and checked
// before each write and at close (device, inode and the size written); when the process closed it
// (and may have reused its number), the file is opened again by path (absolute, taken at
// creation) if that path still names the same file, else writing fails ("... was removed or
// replaced"). A descriptor that is no longer this file's is never written to or closed.
class TraceFileWriter {
 public:
  // Creates (truncates) `path`. Returns nullptr and sets `error` on failure.
  static std::unique_ptr<TraceFileWriter> Create(const std::string& path, std::string* error);
  // Creates a file that did not exist, in the directory `dir`: `<stem><suffix>`, or when that
  // name is taken (by a file, a link, anything: left alone) `<stem>.1<suffix>`, `.2`, ... (at most
  // kMaxNameTries names). Opened relative to `dir` with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode
  // 0644 (less the umask): it never follows a link at the name, never truncates, never writes
  // outside `dir`. `stem` (not empty) and `suffix` must not contain '/'. Returns nullptr and sets
  // `error` ("DIR/NAME: reason") on failure; path() is the path created.
  static constexpr int kMaxNameTries = 1000;
  static std::unique_ptr<TraceFileWriter> CreateNew(const std::string& dir, const std::string& stem,
                                                    const std::string& suffix, std::string* error);
  ~TraceFileWriter();
  TraceFileWriter(const TraceFileWriter&) = delete;
  TraceFileWriter& operator=(const TraceFileWriter&) = delete;

  bool Write(const v1::TraceRecord& record);
  // Writes already-framed bytes (from AppendRecord): all of them, or none (see above). On failure
  // error() says why ("PATH: No space left on device").
  bool WriteFramed(const std::string& bytes);
  // Cuts the file back to `size` bytes, a size() it had (to take back what was written since).
  bool Truncate(uint64_t size);
  // Bytes written: where the next record goes.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }
  // Whether path() still names this writer's file (not moved, removed or replaced since).
  bool AtItsPath() const;

 private:
  TraceFileWriter(int fd, std::string path);
  // The descriptor of this writer's file, opened again when the process closed or reused it; -1
  // (error() set) when the file cannot be had.
  int Fd();
  // Whether `fd` is open on this writer's file (device, inode, and the size it wrote).
  bool Mine(int fd) const;
  int fd_;
  std::string path_;
  std::string reopen_path_;  // absolute
  uint64_t dev_ = 0, ino_ = 0;
  uint64_t size_ = 0;
  std::string error_;
};

// Reads records one at a time, with bounded memory.
class TraceFileReader {
 public:
  enum class Status { kRecord, kEnd, kDamaged };

  // Opens `path`, a regular file (a FIFO, device or directory is refused without blocking).
  // Returns nullptr and sets `error` ("PATH: reason") on failure.
  static std::unique_ptr<TraceFileReader> Open(const std::string& path, std::string* error);
  ~TraceFileReader();
  TraceFileReader(const TraceFileReader&) = delete;
  TraceFileReader& operator=(const TraceFileReader&) = delete;

  // Next record. After kDamaged or kEnd every further call returns the same status. Records are
  // parsed in place from a 1 MiB read buffer; an event record reuses the event `record` already
  // holds, so a loop over one record allocates nothing per event.
  Status Next(v1::TraceRecord* record);
  // For kDamaged: what is wrong and at which byte offset the damaged record starts.
  const std::string& damage() const { return damage_; }
  uint64_t records() const { return records_; }
  uint64_t bytes_consumed() const { return offset_; }
  uint64_t file_size() const { return file_size_; }

 private:
  struct Impl;
  explicit TraceFileReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string damage_;
  uint64_t records_ = 0;
  uint64_t offset_ = 0;
  uint64_t file_size_ = 0;
  Status final_ = Status::kRecord;
};

}  // namespace fp8audit
