#include "agent/src/trace_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/src/warn.h"
#include "fp8audit/redact.h"
#include "fp8audit/vocabulary.h"
#include "proto/text_escape.h"

#ifndef FP8AUDIT_VERSION
#define FP8AUDIT_VERSION "unknown"
#endif

namespace fp8audit::agent {

namespace v1 = ::fp8audit::v1;

namespace {

void MakeDirs(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (!partial.empty()) ::mkdir(partial.c_str(), 0755);
  }
}

// The process's argv as /proc/self/cmdline holds it: at most 256 arguments of 4096 bytes, 64 KiB
// in all; `cut` says whether anything was left out.
std::vector<std::string> ReadCommandLine(bool* cut) {
  *cut = false;
  std::vector<std::string> args;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string text;
  char buf[4096];
  bool more = false;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() >= 65536) {
      more = true;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t start = 0;
  while (start < text.size() && args.size() < 256) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    if (end - start > 4096) *cut = true;
    args.push_back(text.substr(start, std::min<size_t>(end - start, 4096)));
    start = end + 1;
  }
  if (more || start < text.size()) *cut = true;
  return args;
}

std::string Mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

v1::TraceHeader MakeTraceHeader(const Config& c, const std::string& host, uint32_t pid,
                                uint32_t parent_pid, const std::vector<std::string>& command,
                                const CudaFacts& facts, uint32_t probes) {
  v1::TraceHeader h;
  h.set_schema_version(1);
  h.set_host(host);
  h.set_pid(pid);
  h.set_rank(c.rank);
  for (const std::string& arg : command) h.add_command(arg);
  h.set_agent_version(FP8AUDIT_VERSION);
  h.set_gpu(facts.gpu);
  h.set_driver(facts.driver);
  h.set_cuda(facts.cuda);
  h.set_cupti(facts.cupti);
  h.set_cupti_api_version(facts.cupti_api_version);
  // Recorded only where given: absent, the audit expects 1/1 and follows the job's recipes.
  if (c.expect_forward_given) h.set_expect_forward(c.expect_forward);
  if (c.expect_backward_given) h.set_expect_backward(c.expect_backward);
  h.set_markers(c.markers_configured ? "nvtx" : "threads");
  h.set_parent_pid(parent_pid);
  h.set_probe_mode(std::string(ProbeModeName(c.probe)));
  h.set_run_id(c.run_id);
  for (const std::string& name : ProbeNames(probes)) h.add_probes(name);
  EscapeNonUtf8Fields(&h);
  return h;
}

TraceWriter::TraceWriter(TraceSource& source)
    : source_(source), converter_(source.config().format), live_(source.config()) {}

bool TraceWriter::Open() {
  const Config& c = source_.config();
  // The header first, so that it follows the file's creation at once: a process that ends right
  // then leaves as short an empty file as can be.
  v1::TraceRecord record;
  v1::TraceHeader* h = record.mutable_header();
  bool command_cut = false;
  std::vector<std::string> command = ReadCommandLine(&command_cut);
  if (c.redact) RedactCommand(&command, c.redact_words);  // before anything is written
  *h = MakeTraceHeader(c, source_.host(), source_.pid(), source_.parent_pid(), command,
                       source_.cuda_facts(), source_.probes());
  h->set_command_cut(command_cut);
  h->set_start_unix_ns(UnixNs());
  MakeDirs(c.out_dir);
  // <host>.<pid>[.N][.rank<r>].fp8trace, created exclusively: a name already taken (a planted
  // link, a trace of an earlier process with this pid, this process's before an exec) is left
  // alone for the next N.
  std::string error;
  file_ = TraceFileWriter::CreateNew(
      c.out_dir, source_.host() + "." + std::to_string(source_.pid()),
      (c.rank >= 0 ? ".rank" + std::to_string(c.rank) : "") + ".fp8trace", &error);
  if (file_ == nullptr) {
    Warn("cannot write the trace: " + error + "; recording stops");
    return false;
  }
  path_ = file_->path();
  live_.OnHeader(*h);
  AppendRecord(record, &buffer_);
  Flush();  // a full disk keeps the header queued, as any record
  return true;
}

void TraceWriter::Convert(bool everything, bool final) {
  source_.rings().Drain(&pending_);
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const RawEvent& a, const RawEvent& b) { return a.ts_ns < b.ts_ns; });
  const uint64_t now = MonotonicNs();
  size_t cut = pending_.size();
  if (!everything && pending_.size() < (1u << 20)) {
    const uint64_t limit = now > kOrderSlackNs ? now - kOrderSlackNs : 0;
    cut = static_cast<size_t>(
        std::upper_bound(pending_.begin(), pending_.end(), limit,
                         [](uint64_t t, const RawEvent& e) { return t < e.ts_ns; }) -
        pending_.begin());
  }
  events_.clear();
  for (size_t i = 0; i < cut; ++i) converter_.Push(pending_[i], &events_);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(cut));
  converter_.Tick(now, &events_);
  if (final) converter_.Flush(&events_);
}

void TraceWriter::AppendEvents() {
  for (v1::Event& e : events_) {
    live_.OnEvent(e);
    if (write_failed_ && buffer_.size() >= kMaxUnwrittenBytes) {
      ++unwritten_dropped_;
      if (!drop_said_) {
        drop_said_ = true;
        Warn("the trace " + path_ + " still cannot be written (" + Reason() + ") and " +
             Mib(kMaxUnwrittenBytes) +
             " of records wait for it: events are dropped from now on (the footer counts "
             "them)");
      }
      continue;
    }
    v1::TraceRecord record;
    *record.mutable_event() = std::move(e);
    AppendRecord(record, &buffer_);
    ++events_written_;
  }
}

void TraceWriter::AppendFooter() {
  v1::TraceRecord record;
  v1::TraceFooter* f = record.mutable_footer();
  f->set_events(events_written_);
  f->set_dropped(source_.rings().Dropped() + unwritten_dropped_);
  f->set_end_unix_ns(UnixNs());
  f->set_kernel_launches(source_.launches());
  if (!sealed_) live_.Finish(*f);
  AppendRecord(record, &buffer_);
}

void TraceWriter::Cycle(bool everything, bool final) {
  if (sealed_) return;
  Convert(everything, final);
  AppendEvents();
  if (final) AppendFooter();
  if (!Flush() && final && file_ != nullptr) {
    Warn("the trace " + path_ + " ends without its footer at byte " +
         std::to_string(file_->size()) + ": its last " + std::to_string(buffer_.size()) +
         " bytes of records could not be written (" + Reason() + ")");
  } else if (final && file_ != nullptr && !file_->AtItsPath()) {
    Warn("the trace " + path_ +
         " was moved or removed while the job ran: it was written to the end wherever it went, "
         "but fp8audit run and report look for it at that path (leave the trace folder's files "
         "in place)");
  }
}

void TraceWriter::Seal() {
  if (sealed_ || file_ == nullptr) return;
  Convert(true, true);
  AppendEvents();
  footer_at_ = file_->size() + buffer_.size();
  sealed_ = true;
  AppendFooter();
  Flush();
}

void TraceWriter::Unseal() {
  if (!sealed_) return;
  sealed_ = false;
  if (file_->size() > footer_at_) {
    // The footer was written: cut off again, so that what follows is not "after the footer".
    if (!file_->Truncate(footer_at_)) {
      Warn("cannot take back the footer of " + path_ + " after a failed exec (" + Reason() +
           "): what follows it there is not read");
    }
  } else {
    buffer_.resize(footer_at_ - file_->size());  // still queued: dropped from the queue
  }
}

bool TraceWriter::fail_fast_now() const { return source_.config().fail_fast && live_.failed(); }

std::string TraceWriter::Reason() const {
  const std::string& e = file_ != nullptr ? file_->error() : path_;
  return e.rfind(path_ + ": ", 0) == 0 ? e.substr(path_.size() + 2) : e;
}

bool TraceWriter::Flush() {
  if (buffer_.empty() || file_ == nullptr) return true;
  if (file_->WriteFramed(buffer_)) {
    buffer_.clear();
    write_failed_ = false;
    return true;
  }
  write_failed_ = true;
  if (!failure_said_) {
    failure_said_ = true;
    Warn("cannot write the trace " + path_ + " (" + Reason() + ") at byte " +
         std::to_string(file_->size()) + ": it ends with a whole record; what is not " +
         "written waits (up to " + Mib(kMaxUnwrittenBytes) + ") for room");
  }
  return false;
}

}  // namespace fp8audit::agent
