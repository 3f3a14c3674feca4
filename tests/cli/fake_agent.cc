// A stand-in for libfp8audit.so in `fp8audit run` tests: preloaded into the command, it writes a
// trace at load time as $FP8AUDIT_FAKE_TRACE describes ("F/B,F/B,...": forward/backward updates
// per marked microbatch; "NxF/B": N such microbatches) into $FP8AUDIT_OUT, its header naming
// $FP8AUDIT_RUN_ID as the real agent's does, and appends the
// injection environment it saw to $FP8AUDIT_FAKE_ENV_DUMP; $FP8AUDIT_FAKE_TE_VERSION records that
// TE was imported (a TE_VERSION event first). $FP8AUDIT_FAKE_KILLED leaves out the
// last microbatch's end marker and the footer, as a process killed inside it leaves its trace.
// Writes the protobuf wire format itself so that it links nothing but libc (it is loaded into sh,
// never sanitized).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void Field(int number, uint64_t value, std::string* out) {
  Varint(static_cast<uint64_t>(number) << 3, out);
  Varint(value, out);
}

void Bytes(int number, const std::string& value, std::string* out) {
  Varint((static_cast<uint64_t>(number) << 3) | 2, out);
  Varint(value.size(), out);
  *out += value;
}

// A TraceRecord holding `message` as field `which` (1 header, 2 event, 3 footer), size-prefixed.
void Record(int which, const std::string& message, std::string* out) {
  std::string record;
  Bytes(which, message, &record);
  Varint(record.size(), out);
  *out += record;
}

uint64_t g_time = 1000000000;

void Event(int kind, uint64_t thread, int source, const char* detail, std::string* out) {
  std::string e;
  Field(1, static_cast<uint64_t>(kind), &e);
  Field(2, g_time += 100000, &e);
  Field(3, thread, &e);
  Field(4, static_cast<uint64_t>(source), &e);
  if (detail != nullptr) Bytes(5, detail, &e);
  Record(2, e, out);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

__attribute__((constructor)) void FakeAgent() {
  if (const char* dump = std::getenv("FP8AUDIT_FAKE_ENV_DUMP")) {
    std::string lines;
    for (const char* name :
         {"LD_PRELOAD", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "FP8AUDIT_OUT",
          "FP8AUDIT_EXPECT_FORWARD", "FP8AUDIT_EXPECT_BACKWARD", "FP8AUDIT_FAIL_FAST",
          "FP8AUDIT_PATTERNS", "FP8AUDIT_SELF_PROFILE", "FP8AUDIT_ON_FULL", "FP8AUDIT_PROBE",
          "FP8AUDIT_PYHOOK", "FP8AUDIT_RUN_ID", "PYTHONPATH"}) {
      const char* value = std::getenv(name);
      lines += std::string(name) + "=" + (value != nullptr ? value : "<unset>") + "\n";
    }
    const int fd = ::open(dump, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, lines.data(), lines.size());
      (void)ignored;
      ::close(fd);
    }
  }
  const char* spec = std::getenv("FP8AUDIT_FAKE_TRACE");
  const char* out_dir = std::getenv("FP8AUDIT_OUT");
  if (spec == nullptr || out_dir == nullptr) return;

  const auto pid = static_cast<uint64_t>(::getpid());
  std::string bytes;
  std::string header;
  Field(1, 1, &header);
  Bytes(2, "testhost", &header);
  Field(3, pid, &header);
  Field(4, ~uint64_t{0}, &header);  // rank -1
  Bytes(13, "nvtx", &header);
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);  // start_unix_ns, as the agent's: which run came last
  Field(10, static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec),
        &header);
  if (const char* run = std::getenv("FP8AUDIT_RUN_ID"); run != nullptr) Bytes(20, run, &header);
  Record(1, header, &bytes);
  const char* kernel = "transformer_engine::delayed_scaling_recipe::kernel_bulk";
  enum { kUpdateForward = 7, kUpdateBackward = 8, kBegin = 11, kEnd = 12 };
  enum { kNvtx = 2, kKernel = 3 };
  const bool killed = std::getenv("FP8AUDIT_FAKE_KILLED") != nullptr;
  uint64_t events = 0;
  if (const char* te = std::getenv("FP8AUDIT_FAKE_TE_VERSION"); te != nullptr) {
    std::string e;  // TE_VERSION from the Python hook, as the agent records it
    Field(1, 19, &e);
    Field(2, g_time += 100000, &e);
    Field(3, pid, &e);
    Field(4, 6, &e);
    Bytes(18, te, &e);
    Record(2, e, &bytes);
    ++events;
  }
  for (const char* p = spec; *p != '\0';) {
    char* next = nullptr;
    long repeat = 1;
    long forward = std::strtol(p, &next, 10);
    if (*next == 'x') {
      repeat = forward;
      forward = std::strtol(next + 1, &next, 10);
    }
    const long backward = *next == '/' ? std::strtol(next + 1, &next, 10) : 0;
    for (long r = 0; r < repeat; ++r) {
      Event(kBegin, pid, kNvtx, "fp8audit.microbatch", &bytes);
      for (long i = 0; i < forward; ++i) Event(kUpdateForward, pid, kKernel, kernel, &bytes);
      for (long i = 0; i < backward; ++i) Event(kUpdateBackward, pid + 1, kKernel, kernel, &bytes);
      const bool last = *next == '\0' && r + 1 == repeat;
      if (!(killed && last)) Event(kEnd, pid, kNvtx, nullptr, &bytes);
      events += 2 + static_cast<uint64_t>(forward + backward);
    }
    p = *next == ',' ? next + 1 : next;
    if (next == p && *p != '\0') break;
  }
  if (!killed) {
    std::string footer;
    Field(1, events, &footer);
    Record(3, footer, &bytes);
  }
  if (std::getenv("FP8AUDIT_FAKE_DAMAGE") != nullptr) bytes.resize(bytes.size() - 3);
  WriteFile(std::string(out_dir) + "/testhost." + std::to_string(pid) + ".fp8trace", bytes);
}

}  // namespace
