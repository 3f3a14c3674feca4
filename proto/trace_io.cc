#include "proto/trace_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::unique_ptr<TraceFileWriter> TraceFileWriter::Create(const std::string& path,
                                                         std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<TraceFileWriter>(new TraceFileWriter(fd, path));
}

TraceFileWriter::~TraceFileWriter() { ::close(fd_); }

bool TraceFileWriter::Write(const v1::TraceRecord& record) {
  std::string bytes;
  AppendRecord(record, &bytes);
  return WriteFramed(bytes);
}

bool TraceFileWriter::WriteFramed(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

struct TraceFileReader::Impl {
  explicit Impl(int fd) : file(fd, kBlockBytes) { file.SetCloseOnDelete(true); }
  static constexpr int kBlockBytes = 1 << 20;
  pbio::FileInputStream file;
  std::string buffer;  // one record's bytes, reused
};

TraceFileReader::TraceFileReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceFileReader::~TraceFileReader() = default;

std::unique_ptr<TraceFileReader> TraceFileReader::Open(const std::string& path,
                                                       std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = path + ": not a regular file";
    ::close(fd);
    return nullptr;
  }
  auto reader = std::unique_ptr<TraceFileReader>(new TraceFileReader(std::make_unique<Impl>(fd)));
  reader->file_size_ = static_cast<uint64_t>(st.st_size);
  return reader;
}

TraceFileReader::Status TraceFileReader::Next(v1::TraceRecord* record) {
  if (final_ != Status::kRecord) return final_;
  // One CodedInputStream per record keeps its internal byte limits per record, not per file.
  pbio::CodedInputStream in(&impl_->file);
  uint32_t size = 0;
  const uint64_t start = offset_;
  auto damaged = [&](const std::string& why) {
    damage_ =
        "record " + std::to_string(records_ + 1) + " at byte " + std::to_string(start) + ": " + why;
    final_ = Status::kDamaged;
    return final_;
  };
  if (!in.ReadVarint32(&size)) {
    if (in.CurrentPosition() == 0 && offset_ == file_size_) {
      final_ = Status::kEnd;
      return final_;
    }
    return damaged("truncated size prefix");
  }
  if (size > kMaxTraceRecordBytes) {
    return damaged("size " + std::to_string(size) + " exceeds the record limit");
  }
  if (start + static_cast<uint64_t>(in.CurrentPosition()) + size > file_size_) {
    return damaged("truncated (" + std::to_string(size) + "-byte record, " +
                   std::to_string(file_size_ - start - in.CurrentPosition()) + " bytes left)");
  }
  // The size was checked against the bytes left, so the buffer never outgrows the file; parsing
  // from the flat copy bounds every length inside the record by the record itself.
  if (!in.ReadString(&impl_->buffer, static_cast<int>(size))) {
    return damaged("truncated record");
  }
  if (!record->ParseFromString(impl_->buffer)) {
    return damaged("not a valid record");
  }
  offset_ = start + static_cast<uint64_t>(in.CurrentPosition());
  ++records_;
  return Status::kRecord;
}

}  // namespace fp8audit
