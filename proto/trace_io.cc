#include "proto/trace_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proto/fd_guard.h"
#include "proto/file_kind.h"

namespace fp8audit {

namespace pbio = google::protobuf::io;

void AppendRecord(const v1::TraceRecord& record, std::string* out) {
  const size_t size = record.ByteSizeLong();
  const size_t prefix = pbio::CodedOutputStream::VarintSize32(static_cast<uint32_t>(size));
  const size_t start = out->size();
  out->resize(start + prefix + size);
  auto* p = reinterpret_cast<uint8_t*>(out->data() + start);
  p = pbio::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
  record.SerializeWithCachedSizesToArray(p);
}

TraceFileWriter::TraceFileWriter(int fd, std::string path)
    : fd_(MoveFdHigh(fd)), path_(std::move(path)) {
  const FdIdentity id = FdIdentity::Of(fd_);
  dev_ = id.dev;
  ino_ = id.ino;
  if (!path_.empty() && path_[0] == '/') {
    reopen_path_ = path_;
  } else {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) != nullptr) reopen_path_ = std::string(cwd) + "/" + path_;
  }
}

std::unique_ptr<TraceFileWriter> TraceFileWriter::Create(const std::string& path,
                                                         std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<TraceFileWriter>(new TraceFileWriter(fd, path));
}

std::unique_ptr<TraceFileWriter> TraceFileWriter::CreateNew(const std::string& dir,
                                                            const std::string& stem,
                                                            const std::string& suffix,
                                                            std::string* error) {
  if (stem.empty() || stem.find('/') != std::string::npos ||
      suffix.find('/') != std::string::npos) {
    *error = dir + "/" + stem + suffix + ": not a file name in the directory";
    return nullptr;
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    *error = dir + ": " + std::strerror(errno);
    return nullptr;
  }
  std::string name;
  int fd = -1;
  for (int n = 0; n < kMaxNameTries && fd < 0; ++n) {
    name = stem + (n == 0 ? "" : "." + std::to_string(n)) + suffix;
    fd = ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  const int open_errno = errno;
  ::close(dir_fd);
  if (fd < 0) {
    *error = dir + "/" + name + ": " +
             (open_errno == EEXIST ? "this name and " + std::to_string(kMaxNameTries - 1) +
                                         " numbered ones are taken"
                                   : std::string(std::strerror(open_errno)));
    return nullptr;
  }
  return std::unique_ptr<TraceFileWriter>(new TraceFileWriter(fd, dir + "/" + name));
}

TraceFileWriter::~TraceFileWriter() {
  if (Mine(fd_)) ::close(fd_);
}

bool TraceFileWriter::AtItsPath() const {
  struct stat st {};
  return !reopen_path_.empty() && ::stat(reopen_path_.c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_dev) == dev_ && static_cast<uint64_t>(st.st_ino) == ino_;
}

bool TraceFileWriter::Mine(int fd) const {
  // Device and inode, and the size this writer gave it: an inode number is reused at once for a
  // file created after this one was removed.
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == dev_ &&
         static_cast<uint64_t>(st.st_ino) == ino_ && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == size_;
}

int TraceFileWriter::Fd() {
  if (Mine(fd_)) return fd_;
  // Closed by the process, and its number perhaps reused: never touched again.
  fd_ = -1;
  const int fd = reopen_path_.empty()
                     ? -1
                     : ::open(reopen_path_.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error_ = path_ + ": its descriptor was closed and it cannot be opened again (" +
             std::strerror(errno) + ")";
    return -1;
  }
  if (!Mine(fd)) {
    ::close(fd);
    error_ = path_ + ": its descriptor was closed and the file was removed or replaced";
    return -1;
  }
  fd_ = MoveFdHigh(fd);
  return fd_;
}

bool TraceFileWriter::Write(const v1::TraceRecord& record) {
  std::string bytes;
  AppendRecord(record, &bytes);
  return WriteFramed(bytes);
}

bool TraceFileWriter::WriteFramed(const std::string& bytes) {
  const int fd = Fd();
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = n < 0 ? errno : ENOSPC;
      error_ = path_ + ": " + std::strerror(saved);
      // Take back the part written: the file ends with the last whole record again.
      if (done > 0 && ::ftruncate(fd, static_cast<off_t>(size_)) != 0) {
        error_ += "; a partial record is left at byte " + std::to_string(size_) + " (" +
                  std::strerror(errno) + ")";
      }
      errno = saved;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  size_ += done;
  return true;
}

bool TraceFileWriter::Truncate(uint64_t size) {
  if (size > size_) return false;
  const int fd = Fd();
  if (fd < 0) return false;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    error_ = path_ + ": " + std::strerror(errno);
    return false;
  }
  size_ = size;
  return true;
}

namespace {

// A varint of at most `max_bytes` bytes from `p` (`n` available), its low 32 bits in `value`.
// Returns the bytes it took, 0 when it does not end within them.
size_t DecodeVarint32(const uint8_t* p, size_t n, size_t max_bytes, uint32_t* value) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && i < max_bytes; ++i) {
    v |= static_cast<uint64_t>(p[i] & 0x7F) << (7 * std::min<size_t>(i, 9));
    if ((p[i] & 0x80) == 0) {
      *value = static_cast<uint32_t>(v);
      return i + 1;
    }
  }
  return 0;
}

// A record's size prefix: a varint of at most 10 bytes holding at most 64 bits.
enum class Prefix { kOk, kShort, kMalformed };
Prefix DecodeSizePrefix(const uint8_t* p, size_t n, uint64_t* value, size_t* length) {
  constexpr size_t kMaxVarintBytes = 10;
  uint64_t v = 0;
  for (size_t i = 0; i < n && i < kMaxVarintBytes; ++i) {
    const uint64_t bits = p[i] & 0x7F;
    // The tenth byte holds bit 63 only.
    if (i == kMaxVarintBytes - 1 && bits > 1) return Prefix::kMalformed;
    v |= bits << (7 * i);
    if ((p[i] & 0x80) == 0) {
      *value = v;
      *length = i + 1;
      return Prefix::kOk;
    }
  }
  return n >= kMaxVarintBytes ? Prefix::kMalformed : Prefix::kShort;
}

// Parses one record's bytes. An event record (the usual kind: field 2 alone, spanning the record)
// is parsed into the event `record` already holds, so its strings keep their storage and reading
// allocates nothing per record; anything else goes through the record's own parser.
bool ParseRecord(const uint8_t* p, size_t size, v1::TraceRecord* record) {
  constexpr uint8_t kEventTag = (2 << 3) | 2;  // field 2, length-delimited
  if (size >= 2 && p[0] == kEventTag) {
    uint32_t len = 0;
    const size_t n = DecodeVarint32(p + 1, size - 1, 4, &len);
    if (n > 0 && 1 + n + static_cast<size_t>(len) == size) {
      // Whatever else the record held goes; its event (if any) is kept aside and parsed into.
      std::unique_ptr<v1::Event> event(record->has_event() ? record->release_event() : nullptr);
      record->Clear();
      if (event != nullptr) record->set_allocated_event(event.release());
      return record->mutable_event()->ParseFromArray(p + 1 + n, static_cast<int>(len));
    }
  }
  return record->ParseFromArray(p, static_cast<int>(size));
}

}  // namespace

// The file through one read buffer: records are parsed where they lie in it, never copied.
struct TraceFileReader::Impl {
  explicit Impl(int fd) : fd(fd) {}
  ~Impl() { ::close(fd); }

  static constexpr size_t kBlockBytes = 1 << 20;

  // Makes `want` bytes from `pos` on available unless the file ends first; returns how many are.
  // The buffer grows past kBlockBytes only for a record that is larger (kMaxTraceRecordBytes).
  size_t Fill(size_t want) {
    if (end - pos >= want || eof) return end - pos;
    if (capacity - pos < want) {
      const size_t live = end - pos;
      if (capacity < want) {
        const size_t grown = std::max(want, kBlockBytes);
        auto bigger = std::make_unique<uint8_t[]>(grown);
        if (live > 0) std::memcpy(bigger.get(), data.get() + pos, live);
        data = std::move(bigger);
        capacity = grown;
      } else if (live > 0) {
        std::memmove(data.get(), data.get() + pos, live);
      }
      pos = 0;
      end = live;
    }
    while (end - pos < want) {
      const ssize_t n = ::read(fd, data.get() + end, capacity - end);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof = true;  // a read error ends the file where it happened, as a short file would
        break;
      }
      end += static_cast<size_t>(n);
    }
    return end - pos;
  }

  int fd;
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
  size_t pos = 0;  // next unread byte
  size_t end = 0;  // end of the bytes read
  bool eof = false;
};

TraceFileReader::TraceFileReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceFileReader::~TraceFileReader() = default;

std::unique_ptr<TraceFileReader> TraceFileReader::Open(const std::string& path,
                                                       std::string* error) {
  // Non-blocking, so that a FIFO (or a device) is refused at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *error = path + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = path + ": not a regular file (" + FileKind(st.st_mode) + ")";
    ::close(fd);
    return nullptr;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  auto reader = std::unique_ptr<TraceFileReader>(new TraceFileReader(std::make_unique<Impl>(fd)));
  reader->file_size_ = static_cast<uint64_t>(st.st_size);
  return reader;
}

TraceFileReader::Status TraceFileReader::Next(v1::TraceRecord* record) {
  if (final_ != Status::kRecord) return final_;
  Impl& in = *impl_;
  const uint64_t start = offset_;
  auto damaged = [&](const std::string& why) {
    damage_ =
        "record " + std::to_string(records_ + 1) + " at byte " + std::to_string(start) + ": " + why;
    final_ = Status::kDamaged;
    return final_;
  };
  // The size prefix: a varint of at most 10 bytes, read in full (a size beyond 32 bits is not
  // cut to its low bits).
  const size_t avail = in.Fill(10);
  if (avail == 0 && offset_ == file_size_) {
    final_ = Status::kEnd;
    return final_;
  }
  uint64_t size = 0;
  size_t prefix = 0;
  switch (DecodeSizePrefix(in.data.get() + in.pos, avail, &size, &prefix)) {
    case Prefix::kShort:
      return damaged("truncated size prefix");
    case Prefix::kMalformed:
      return damaged("malformed size prefix (not a varint of at most 64 bits)");
    case Prefix::kOk:
      break;
  }
  if (size == 0) return damaged("an empty record (a writer never frames one)");
  if (size > kMaxTraceRecordBytes) {
    return damaged("size " + std::to_string(size) + " exceeds the record limit (" +
                   std::to_string(kMaxTraceRecordBytes) + " bytes)");
  }
  if (start + prefix + size > file_size_) {
    return damaged("truncated (" + std::to_string(size) + "-byte record, " +
                   std::to_string(file_size_ - start - prefix) + " bytes left)");
  }
  // The size was checked against the bytes left, so the buffer never outgrows the file; parsing
  // the record's bytes alone bounds every length inside the record by the record itself.
  if (in.Fill(prefix + size) < prefix + size) return damaged("truncated record");
  if (!ParseRecord(in.data.get() + in.pos + prefix, size, record)) {
    return damaged("not a valid record");
  }
  in.pos += prefix + size;
  offset_ = start + prefix + size;
  ++records_;
  return Status::kRecord;
}

}  // namespace fp8audit
