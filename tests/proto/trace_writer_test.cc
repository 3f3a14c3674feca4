// TraceFileWriter inside a process that does not know about it: a write cut short (the file size
// limit standing in for a full disk) leaves no torn record, and a descriptor the process closed and
// reused for its own file is never written to.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proto/trace_io.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

namespace fs = std::filesystem;

class TraceWriterTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return tmp_.Path(name); }
  testutil::TempDir tmp_{"fp8audit-trace-writer-"};
  const fs::path dir_{tmp_.path()};
};

v1::TraceRecord Event(uint32_t microbatch) {
  v1::TraceRecord r;
  r.mutable_event()->set_kind(v1::UPDATE_FORWARD);
  r.mutable_event()->set_microbatch(microbatch);
  r.mutable_event()->set_detail(std::string(40, 'k'));
  return r;
}

std::string Framed(uint32_t first, uint32_t count) {
  std::string bytes;
  for (uint32_t i = first; i < first + count; ++i) AppendRecord(Event(i), &bytes);
  return bytes;
}

// The microbatch numbers of the records in `path`; `damage` says where reading stopped, if it did.
std::vector<uint32_t> Read(const std::string& path, std::string* damage) {
  std::vector<uint32_t> out;
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  if (reader == nullptr) {
    *damage = error;
    return out;
  }
  v1::TraceRecord r;
  for (;;) {
    const auto status = reader->Next(&r);
    if (status == TraceFileReader::Status::kEnd) break;
    if (status == TraceFileReader::Status::kDamaged) {
      *damage = reader->damage();
      break;
    }
    out.push_back(r.event().microbatch());
  }
  return out;
}

std::vector<uint32_t> Range(uint32_t first, uint32_t count) {
  std::vector<uint32_t> v;
  for (uint32_t i = first; i < first + count; ++i) v.push_back(i);
  return v;
}

// The descriptor of this process open on `path` (-1 when none is).
int DescriptorOf(const std::string& path) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char target[PATH_MAX] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n > 0 && path == std::string(target, static_cast<size_t>(n))) found = std::atoi(e->d_name);
  }
  closedir(dir);
  return found;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_F(TraceWriterTest, AWriteCutShortLeavesTheFileAtItsLastWholeRecordAndCanBeRetried) {
  std::string error;
  const std::string path = Path("short.fp8trace");
  auto writer = TraceFileWriter::Create(path, &error);
  ASSERT_NE(writer, nullptr) << error;
  ASSERT_TRUE(writer->WriteFramed(Framed(0, 3)));
  const auto whole = fs::file_size(path);
  // Room for a part of the next write only, as a disk that fills up.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &previous), 0);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit full = old;
  full.rlim_cur = static_cast<rlim_t>(whole) + 30;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &full), 0);
  const std::string next = Framed(3, 4);
  const bool written = writer->WriteFramed(next);
  const auto size_when_full = fs::file_size(path);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  sigaction(SIGXFSZ, &previous, nullptr);
  EXPECT_FALSE(written);
  EXPECT_EQ(size_when_full, whole);  // the part that fitted was taken back
  // With room again the same bytes are written, after the last whole record.
  ASSERT_TRUE(writer->WriteFramed(next));
  ASSERT_TRUE(writer->WriteFramed(Framed(7, 1)));
  std::string damage;
  EXPECT_EQ(Read(path, &damage), Range(0, 8));
  EXPECT_EQ(damage, "");
}

TEST_F(TraceWriterTest, ADescriptorTheProcessClosedAndReusedIsNeverWrittenTo) {
  std::string error;
  const std::string path = Path("guarded.fp8trace");
  auto writer = TraceFileWriter::Create(path, &error);
  ASSERT_NE(writer, nullptr) << error;
  ASSERT_TRUE(writer->WriteFramed(Framed(0, 2)));
  const int fd = DescriptorOf(path);
  ASSERT_GE(fd, 0);
  // The process closes the writer's descriptor and puts a file of its own at its number.
  ASSERT_EQ(::close(fd), 0);
  const std::string theirs = Path("theirs.txt");
  const int opened = ::open(theirs.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(opened, 0);
  const int reused = opened == fd ? fd : ::dup2(opened, fd);
  ASSERT_EQ(reused, fd);
  if (opened != fd) ::close(opened);
  ASSERT_TRUE(writer->WriteFramed(Framed(2, 2)));
  writer.reset();  // closes the trace, not their file
  EXPECT_EQ(::write(reused, "theirs\n", 7), 7) << "their descriptor was closed";
  ::close(reused);
  EXPECT_EQ(Slurp(theirs), "theirs\n");
  std::string damage;
  EXPECT_EQ(Read(path, &damage), Range(0, 4));
  EXPECT_EQ(damage, "");
}

TEST_F(TraceWriterTest, AFileReplacedAfterItsDescriptorWasClosedIsNotWritten) {
  std::string error;
  const std::string path = Path("replaced.fp8trace");
  auto writer = TraceFileWriter::Create(path, &error);
  ASSERT_NE(writer, nullptr) << error;
  ASSERT_TRUE(writer->WriteFramed(Framed(0, 1)));
  const int fd = DescriptorOf(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::close(fd), 0);
  fs::remove(path);
  std::ofstream(path) << "someone else's\n";
  EXPECT_FALSE(writer->WriteFramed(Framed(1, 1)));
  EXPECT_EQ(Slurp(path), "someone else's\n");
}

}  // namespace
}  // namespace fp8audit
