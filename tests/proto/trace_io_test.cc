#include "proto/trace_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

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
