#include "proto/trace_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace fp8audit {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid()) + ".fp8trace"))
      .string();
}

v1::TraceRecord EventRecord(uint32_t microbatch) {
  v1::TraceRecord r;
  auto* e = r.mutable_event();
  e->set_kind(v1::UPDATE_FORWARD);
  e->set_microbatch(microbatch);
  e->set_detail("kernel_bulk");
  return r;
}

std::string WriteTrace(const std::string& name, int events) {
  const std::string path = TempPath(name);
  std::string error;
  auto writer = TraceFileWriter::Create(path, &error);
  EXPECT_NE(writer, nullptr) << error;
  v1::TraceRecord header;
  header.mutable_header()->set_pid(42);
  EXPECT_TRUE(writer->Write(header));
  for (int i = 0; i < events; ++i) EXPECT_TRUE(writer->Write(EventRecord(i)));
  return path;
}

TEST(TraceIo, RoundTripKeepsEveryRecordInOrder) {
  const std::string path = WriteTrace("roundtrip", 100);
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  v1::TraceRecord r;
  ASSERT_EQ(reader->Next(&r), TraceFileReader::Status::kRecord);
  EXPECT_EQ(r.header().pid(), 42u);
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_EQ(reader->Next(&r), TraceFileReader::Status::kRecord);
    EXPECT_EQ(r.event().microbatch(), i);
  }
  EXPECT_EQ(reader->Next(&r), TraceFileReader::Status::kEnd);
  EXPECT_EQ(reader->Next(&r), TraceFileReader::Status::kEnd);
  std::filesystem::remove(path);
}

TEST(TraceIo, TruncatedTraceKeepsWholeRecordsAndReportsDamage) {
  const std::string path = WriteTrace("truncated", 10);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 3);
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_NE(reader, nullptr);
  v1::TraceRecord r;
  int whole = 0;
  while (reader->Next(&r) == TraceFileReader::Status::kRecord) ++whole;
  EXPECT_EQ(whole, 10);  // header + 9 events survive, the 10th event is cut
  EXPECT_EQ(reader->Next(&r), TraceFileReader::Status::kDamaged);
  EXPECT_NE(reader->damage().find("truncated"), std::string::npos) << reader->damage();
  std::filesystem::remove(path);
}

TEST(TraceIo, CorruptedRecordIsReportedWithItsOffset) {
  const std::string path = WriteTrace("corrupt", 5);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0, std::ios::end);
    const auto end = f.tellp();
    f.seekp(end - std::streamoff(1));
    f.put('\xff');  // breaks the last record's final field
  }
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_NE(reader, nullptr);
  v1::TraceRecord r;
  int whole = 0;
  while (reader->Next(&r) == TraceFileReader::Status::kRecord) ++whole;
  EXPECT_EQ(whole, 5);
  EXPECT_NE(reader->damage().find("record 6"), std::string::npos) << reader->damage();
  std::filesystem::remove(path);
}

TEST(TraceIo, HugeSizePrefixIsDamageNotAllocation) {
  const std::string path = TempPath("huge");
  { std::ofstream(path, std::ios::binary) << std::string("\xff\xff\xff\xff\x0f", 5); }
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_NE(reader, nullptr);
  v1::TraceRecord r;
  EXPECT_EQ(reader->Next(&r), TraceFileReader::Status::kDamaged);
  EXPECT_NE(reader->damage().find("limit"), std::string::npos) << reader->damage();
  std::filesystem::remove(path);
}

// Reads `bytes` as a trace: the records before the damage, and the damage ("" when none).
std::pair<int, std::string> ReadBytes(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  { std::ofstream(path, std::ios::binary) << bytes; }
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  EXPECT_NE(reader, nullptr) << error;
  int whole = 0;
  v1::TraceRecord r;
  TraceFileReader::Status status;
  while ((status = reader->Next(&r)) == TraceFileReader::Status::kRecord) ++whole;
  std::filesystem::remove(path);
  return {whole, status == TraceFileReader::Status::kDamaged ? reader->damage() : ""};
}

std::string HeaderBytes() {
  v1::TraceRecord header;
  header.mutable_header()->set_pid(42);
  std::string bytes;
  AppendRecord(header, &bytes);
  return bytes;
}

TEST(TraceIo, SizePrefixOf2To63IsBeyondTheLimitNotAnEmptyRecord) {
  // 2^63 as a varint: nine 0x80 bytes, then 0x01. Its low 32 bits are 0.
  std::string prefix(9, '\x80');
  prefix += '\x01';
  const auto [whole, damage] = ReadBytes("pow63", HeaderBytes() + prefix + "xyz");
  EXPECT_EQ(whole, 1);
  EXPECT_NE(damage.find("record 2 at byte"), std::string::npos) << damage;
  EXPECT_NE(damage.find("size 9223372036854775808 exceeds the record limit"), std::string::npos)
      << damage;
}

TEST(TraceIo, SizePrefixLongerThanAVarintIsDamage) {
  // Eleven continuation bytes: no 64-bit varint is that long.
  const auto [whole, damage] = ReadBytes("longvarint", HeaderBytes() + std::string(11, '\x80'));
  EXPECT_EQ(whole, 1);
  EXPECT_NE(damage.find("malformed size prefix"), std::string::npos) << damage;
  // Ten bytes whose last carries bits beyond 64.
  std::string over(9, '\xff');
  over += '\x7f';
  const auto [whole2, damage2] = ReadBytes("overflow", HeaderBytes() + over);
  EXPECT_EQ(whole2, 1);
  EXPECT_NE(damage2.find("malformed size prefix"), std::string::npos) << damage2;
}

TEST(TraceIo, EmptyRecordsAreDamage) {
  // A writer never frames an empty record: 100,000 of them are not a trace's events.
  const auto [whole, damage] = ReadBytes("emptyrecords", HeaderBytes() + std::string(100000, '\0'));
  EXPECT_EQ(whole, 1);
  EXPECT_NE(damage.find("record 2 at byte"), std::string::npos) << damage;
  EXPECT_NE(damage.find("an empty record"), std::string::npos) << damage;
}

TEST(TraceIo, FifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = TempPath("fifo");
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  // In a child, so that a reader that blocks on the FIFO fails the test instead of hanging it.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(60);
    std::string error;
    auto reader = TraceFileReader::Open(path, &error);
    ::_exit(reader == nullptr && error == path + ": not a regular file (a FIFO)" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::filesystem::remove(path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the reader blocked or accepted the FIFO (status " << status << ")";
}

TEST(TraceIo, DeviceIsRefused) {
  std::string error;
  EXPECT_EQ(TraceFileReader::Open("/dev/zero", &error), nullptr);
  EXPECT_EQ(error, "/dev/zero: not a regular file (a character device)");
}

TEST(TraceIo, EmptyFileReadsAsEndWithNoRecords) {
  const std::string path = TempPath("empty");
  { std::ofstream(path, std::ios::binary); }
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  ASSERT_NE(reader, nullptr);
  v1::TraceRecord r;
  EXPECT_EQ(reader->Next(&r), TraceFileReader::Status::kEnd);
  EXPECT_EQ(reader->records(), 0u);
  std::filesystem::remove(path);
}

TEST(TraceIo, MissingFileIsAnErrorNamingThePath) {
  std::string error;
  EXPECT_EQ(TraceFileReader::Open("/nonexistent/x.fp8trace", &error), nullptr);
  EXPECT_NE(error.find("/nonexistent/x.fp8trace"), std::string::npos);
}

}  // namespace
}  // namespace fp8audit
