// proto/text_escape: recorded bytes that are not UTF-8 survive a trace file (written and read with
// the full protobuf runtime, as reports/ reads them) and come back exact, with nothing logged.
#include "proto/text_escape.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "proto/trace_io.h"
#include "tests/util/posix_fs.h"

namespace fp8audit {
namespace {

TEST(TextEscape, ValidUtf8IsWhatProtobufAccepts) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii \\ with a backslash"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(IsValidUtf8(std::string("nul\0inside", 10)));
  for (const char* bad : {"\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                          "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",
                          "\xc3", "\xe2\x82", "\xf0\x9f\x98", "ok\xc3("}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << EscapeBytes(bad);
  }
}

TEST(TextEscape, EscapesOnlyWhatIsNotUtf8AndBackslashes) {
  EXPECT_EQ(EscapeBytes("k\xff\\x\xc3\xa9"), "k\\xff\\\\x\xc3\xa9");
  EXPECT_EQ(EscapeBytes("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(EscapeBytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate, byte by byte
}

TEST(TextEscape, EveryByteStringRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    std::string back;
    ASSERT_TRUE(UnescapeBytes(EscapeBytes(s), &back)) << b;
    EXPECT_EQ(back, s) << b;
    EXPECT_TRUE(IsValidUtf8(EscapeBytes(s))) << b;
  }
  std::mt19937 rng(12);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? '\\' : rng());
    const std::string escaped = EscapeBytes(s);
    EXPECT_TRUE(IsValidUtf8(escaped));
    std::string back;
    ASSERT_TRUE(UnescapeBytes(escaped, &back));
    EXPECT_EQ(back, s);
  }
}

TEST(TextEscape, UnescapeRejectsWhatEscapeNeverWrites) {
  std::string out;
  for (const char* bad : {"\\", "a\\", "\\x", "\\x4", "\\xg0", "\\q", "\\xFF"}) {
    EXPECT_FALSE(UnescapeBytes(bad, &out)) << bad;
  }
}

// Runs `body` with stderr going to a file; returns what was written there.
template <typename Body>
std::string CaptureStderr(Body body) {
  char path[] = "/tmp/fp8audit-escape-stderr-XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  body();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return text.str();
}

// Writes `records` to a trace and reads them back with TraceFileReader.
std::vector<v1::TraceRecord> RoundTrip(const std::vector<v1::TraceRecord>& records, bool* ok) {
  const testutil::TempDir dir("fp8audit-escape-");
  const std::string path = dir.Path("t.fp8trace");
  std::string error;
  auto writer = TraceFileWriter::Create(path, &error);
  EXPECT_NE(writer, nullptr) << error;
  for (const auto& r : records) EXPECT_TRUE(writer->Write(r));
  writer.reset();
  std::vector<v1::TraceRecord> back;
  auto reader = TraceFileReader::Open(path, &error);
  EXPECT_NE(reader, nullptr) << error;
  v1::TraceRecord r;
  TraceFileReader::Status s;
  while ((s = reader->Next(&r)) == TraceFileReader::Status::kRecord) back.push_back(r);
  *ok = s == TraceFileReader::Status::kEnd;
  return back;
}

TEST(TextEscape, EveryStringFieldOfAHeaderAndAnEventSurvivesATraceFile) {
  const std::string bytes = "x\xff\\y\xc3";
  v1::TraceRecord header_record;
  v1::TraceHeader& h = *header_record.mutable_header();
  h.set_host("host." + bytes);
  h.add_command("/bin/job");
  h.add_command("--name=" + bytes);
  h.set_agent_version("v" + bytes);
  h.set_gpu("gpu" + bytes);
  h.set_driver("drv" + bytes);
  h.set_cuda("cuda" + bytes);
  h.set_markers("m" + bytes);
  h.set_cupti("/opt/" + bytes + "/libcupti.so.12");
  const v1::TraceHeader original_header = h;
  v1::TraceRecord event_record;
  v1::Event& e = *event_record.mutable_event();
  e.set_kind(v1::MODULE_FORWARD);
  e.set_detail("kernel<" + bytes + ">");
  e.set_module("layer." + bytes);
  const v1::Event original_event = e;

  EXPECT_TRUE(EscapeNonUtf8Fields(&h));
  EXPECT_TRUE(EscapeNonUtf8Fields(&e));
  EXPECT_EQ(h.command(0), "/bin/job");  // escaped with the rest: no backslash, unchanged
  EXPECT_EQ(e.detail(), "kernel<x\\xff\\\\y\\xc3>");
  bool ok = false;
  std::vector<v1::TraceRecord> back;
  const std::string logged = CaptureStderr([&] {
    back = RoundTrip({header_record, event_record}, &ok);
  });
  EXPECT_EQ(logged, "");
  ASSERT_TRUE(ok);
  ASSERT_EQ(back.size(), 2u);

  v1::TraceHeader hb = back[0].header();
  using H = v1::TraceHeader;
  for (int field : {H::kHostFieldNumber, H::kCommandFieldNumber, H::kAgentVersionFieldNumber,
                    H::kGpuFieldNumber, H::kDriverFieldNumber, H::kCudaFieldNumber,
                    H::kMarkersFieldNumber, H::kCuptiFieldNumber}) {
    EXPECT_NE(hb.escaped_fields() & (uint64_t{1} << field), 0u) << field;
  }
  ASSERT_TRUE(RestoreEscapedFields(&hb));
  EXPECT_EQ(hb.escaped_fields(), 0u);
  // (Compared field by field: serializing bytes that are not UTF-8 would log.)
  EXPECT_EQ(hb.host(), original_header.host());
  ASSERT_EQ(hb.command_size(), 2);
  EXPECT_EQ(hb.command(0), original_header.command(0));
  EXPECT_EQ(hb.command(1), original_header.command(1));
  EXPECT_EQ(hb.agent_version(), original_header.agent_version());
  EXPECT_EQ(hb.gpu(), original_header.gpu());
  EXPECT_EQ(hb.driver(), original_header.driver());
  EXPECT_EQ(hb.cuda(), original_header.cuda());
  EXPECT_EQ(hb.markers(), original_header.markers());
  EXPECT_EQ(hb.cupti(), original_header.cupti());

  v1::Event eb = back[1].event();
  EXPECT_EQ(eb.escaped_fields(), (uint64_t{1} << v1::Event::kDetailFieldNumber) |
                                     (uint64_t{1} << v1::Event::kModuleFieldNumber));
  ASSERT_TRUE(RestoreEscapedFields(&eb));
  EXPECT_EQ(eb.detail(), original_event.detail());
  EXPECT_EQ(eb.module(), original_event.module());
}

TEST(TextEscape, Utf8RecordsAreLeftAloneAndUnmarked) {
  v1::Event e;
  e.set_detail("caf\xc3\xa9 \\ back");
  EXPECT_FALSE(EscapeNonUtf8Fields(&e));
  EXPECT_EQ(e.detail(), "caf\xc3\xa9 \\ back");
  EXPECT_EQ(e.escaped_fields(), 0u);
  EXPECT_TRUE(RestoreEscapedFields(&e));
  EXPECT_EQ(e.detail(), "caf\xc3\xa9 \\ back");
}

TEST(TextEscape, AMarkedFieldThatIsNotEscapedTextStaysMarked) {
  v1::Event e;
  e.set_detail("bad \\q");
  e.set_module("m\\xff");
  e.set_escaped_fields((uint64_t{1} << v1::Event::kDetailFieldNumber) |
                       (uint64_t{1} << v1::Event::kModuleFieldNumber));
  EXPECT_FALSE(RestoreEscapedFields(&e));
  EXPECT_EQ(e.detail(), "bad \\q");
  EXPECT_EQ(e.module(), "m\xff");
  EXPECT_EQ(e.escaped_fields(), uint64_t{1} << v1::Event::kDetailFieldNumber);
}

}  // namespace
}  // namespace fp8audit
