#include "agent/src/recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/live_check.h"
#include "proto/trace_io.h"

#ifndef FP8AUDIT_VERSION
#define FP8AUDIT_VERSION "unknown"
#endif

namespace fp8audit::agent {

namespace v1 = ::fp8audit::v1;

namespace {

thread_local ThreadState* t_self = nullptr;

// Extra mutexes (the probes' tables) held across fork so a child never inherits one locked.
std::mutex* g_fork_mutexes[8];
std::atomic<int> g_fork_mutex_count{0};

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void MakeDirs(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (!partial.empty()) ::mkdir(partial.c_str(), 0755);
  }
}

std::vector<std::string> ReadCommandLine() {
  std::vector<std::string> args;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string text;
  char buf[4096];
  while (text.size() < 65536) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t start = 0;
  while (start < text.size() && args.size() < 256) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    args.push_back(text.substr(start, std::min<size_t>(end - start, 4096)));
    start = end + 1;
  }
  return args;
}

bool BlockAllSignals(sigset_t* previous) {
  sigset_t all;
  sigfillset(&all);
  return pthread_sigmask(SIG_BLOCK, &all, previous) == 0;
}

}  // namespace

void RegisterForkMutex(std::mutex* mu) {
  const int i = g_fork_mutex_count.fetch_add(1);
  if (i < 8) g_fork_mutexes[i] = mu;
}

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t UnixNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t CurrentTid() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

// ---- The writer: trace file, event conversion, live check (writer thread only) ---------------

class Writer {
 public:
  explicit Writer(Agent& agent)
      : agent_(agent), converter_(agent.config_.format), live_(agent.config_) {}

  bool Open() {
    const Config& c = agent_.config_;
    MakeDirs(c.out_dir);
    path_ = c.out_dir + "/" + agent_.host_ + "." + std::to_string(agent_.pid_) +
            (c.rank >= 0 ? ".rank" + std::to_string(c.rank) : "") + ".fp8trace";
    std::string error;
    file_ = TraceFileWriter::Create(path_, &error);
    if (file_ == nullptr) {
      Agent::Warn("cannot write the trace: " + error + "; recording stops");
      return false;
    }
    v1::TraceRecord record;
    v1::TraceHeader* h = record.mutable_header();
    h->set_schema_version(1);
    h->set_host(agent_.host_);
    h->set_pid(agent_.pid_);
    h->set_rank(c.rank);
    for (std::string& arg : ReadCommandLine()) h->add_command(std::move(arg));
    h->set_agent_version(FP8AUDIT_VERSION);
    {
      std::lock_guard<std::mutex> lock(agent_.facts_mu_);
      h->set_gpu(agent_.gpu_);
      h->set_driver(agent_.driver_);
      h->set_cuda(agent_.cuda_);
    }
    h->set_start_unix_ns(UnixNs());
    h->set_expect_forward(c.expect_forward);
    h->set_expect_backward(c.expect_backward);
    h->set_markers(c.markers_configured ? "nvtx" : "threads");
    h->set_parent_pid(agent_.parent_pid_);
    live_.OnHeader(*h);
    return Append(record) && Flush();
  }

  // One drain. `everything`: write all pending events (no ordering slack). `final`: also release
  // held events and write the footer.
  void Cycle(bool everything, bool final) {
    agent_.DrainRings(&pending_);
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
    for (v1::Event& e : events_) {
      live_.OnEvent(e);
      v1::TraceRecord record;
      *record.mutable_event() = std::move(e);
      Append(record);
      ++events_written_;
    }
    if (final) {
      v1::TraceRecord record;
      v1::TraceFooter* f = record.mutable_footer();
      f->set_events(events_written_);
      f->set_dropped(agent_.DroppedTotal());
      f->set_end_unix_ns(UnixNs());
      f->set_kernel_launches(agent_.launches());
      live_.Finish(*f);
      Append(record);
    }
    Flush();
  }

  bool fail_fast_now() const { return agent_.config_.fail_fast && live_.failed(); }
  const LiveCheck& live() const { return live_; }
  const std::string& path() const { return path_; }

 private:
  bool Append(const v1::TraceRecord& record) {
    AppendRecord(record, &buffer_);
    return true;
  }
  bool Flush() {
    if (buffer_.empty() || file_ == nullptr) return true;
    const bool ok = file_->WriteFramed(buffer_);
    buffer_.clear();
    if (!ok && !write_failed_) {
      write_failed_ = true;
      Agent::Warn("cannot write the trace " + path_ + ": " + std::strerror(errno));
    }
    return ok;
  }

  Agent& agent_;
  EventConverter converter_;
  LiveCheck live_;
  std::unique_ptr<TraceFileWriter> file_;
  std::string path_;
  std::string buffer_;
  std::vector<RawEvent> pending_;
  std::vector<v1::Event> events_;
  uint64_t events_written_ = 0;
  bool write_failed_ = false;
};

// ---- Agent ------------------------------------------------------------------------------------

Agent& Agent::Get() {
  static Agent* agent = new Agent();
  return *agent;
}

void Agent::Warn(const std::string& text) {
  std::string line = "fp8audit: " + text;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  line += '\n';
  WriteAll(STDERR_FILENO, line.data(), line.size());
}

void Agent::WarnOnce(std::atomic<bool>* once, const std::string& text) {
  if (!once->exchange(true)) Warn(text);
}

void Agent::Init() {
  std::call_once(init_once_, [this] { InitOnce(); });
}

static void AgentAnchor() {}

void Agent::InitOnce() {
  std::vector<std::string> warnings;
  char cwd[PATH_MAX];
  const std::string dir = ::getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "";
  config_ = ReadConfig([](const char* name) { return std::getenv(name); }, dir, &warnings);
  for (const std::string& w : warnings) Warn(w);
  if (config_.disabled) return;

  std::vector<PatternRule> user;
  if (!config_.patterns_path.empty()) {
    std::string error;
    if (!LoadPatternFile(config_.patterns_path, &user, &error)) {
      Warn(error + "; using the built-in patterns only");
      user.clear();
    }
  }
  classifier_ = std::make_unique<Classifier>(std::move(user));

  Dl_info info{};
  if (self_path_.empty() && dladdr(reinterpret_cast<void*>(&AgentAnchor), &info) != 0 &&
      info.dli_fname != nullptr) {
    char resolved[PATH_MAX];
    self_path_ = ::realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  for (char* p = host; *p != '\0'; ++p) {
    if (*p == '/') *p = '_';
  }
  host_ = host;
  pid_ = static_cast<uint32_t>(::getpid());
  if (pthread_key_create(&thread_key_, &Agent::OnThreadExit) != 0) return;
  if (::pipe2(wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0) return;
  InstallSignalHandlers();
  pthread_atfork(&Agent::ForkPrepare, &Agent::ForkParent, &Agent::ForkChild);
  std::atexit([] { Agent::Get().Shutdown(); });
  enabled_.store(true, std::memory_order_release);
}

void Agent::InstallSignalHandlers() {
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;  // e.g. nohup
    previous_[sig] = old;
    struct sigaction act {};
    act.sa_sigaction = &Agent::OnSignal;
    act.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    if (sigaction(sig, &act, nullptr) == 0) handled_[sig] = true;
  }
}

ThreadState* Agent::Self() {
  ThreadState* ts = t_self;
  if (ts != nullptr) return ts;
  if (!enabled()) return nullptr;
  ts = new (std::nothrow) ThreadState();
  if (ts == nullptr) return nullptr;
  ts->tid = CurrentTid();
  char name[17] = {};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && std::strncmp(name, "pt_autograd_", 12) == 0) {
    ts->role = Role::kAutograd;
  }
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    ts->next = threads_;
    threads_ = ts;
  }
  pthread_setspecific(thread_key_, ts);
  t_self = ts;
  return ts;
}

void Agent::OnThreadExit(void* state) {
  auto* ts = static_cast<ThreadState*>(state);
  if (t_self == ts) t_self = nullptr;
  ts->retired.store(true, std::memory_order_release);
}

uint8_t Agent::PassOf(const ThreadState* ts) const {
  if (ts->role == Role::kAutograd) return kPassBackward;
  if (ts->role == Role::kTraining) return kPassForward;
  return phase_.load(std::memory_order_relaxed);
}

void Agent::OnLaunchPhase(ThreadState* ts) {
  if (ts->role == Role::kUndecided) {
    uint32_t expected = 0;
    const bool first = training_tid_.compare_exchange_strong(expected, ts->tid);
    ts->role = (first || expected == ts->tid) ? Role::kTraining : Role::kOther;
  }
  if (ts->role == Role::kAutograd) {
    if (phase_.load(std::memory_order_relaxed) != kPassBackward &&
        phase_.exchange(kPassBackward) != kPassBackward) {
      RawEvent e;
      e.kind = RawKind::kBackwardBegin;
      e.SetText("launch on an autograd thread");
      Record(ts, &e);
    }
  } else if (ts->role == Role::kTraining) {
    if (phase_.load(std::memory_order_relaxed) == kPassBackward &&
        phase_.exchange(kPassForward) == kPassBackward) {
      RawEvent e;
      e.kind = RawKind::kBackwardEnd;
      e.SetText("launch on the training thread");
      Record(ts, &e);
    }
  }
}

void Agent::Record(ThreadState* ts, RawEvent* event) {
  if (writer_state_.load(std::memory_order_acquire) >= kStopped) return;
  event->ts_ns = MonotonicNs();
  event->tid = ts->tid;
  event->pass = PassOf(ts);
  event->launches = launches();
  if (ts->slots == nullptr) {
    ts->slots = new (std::nothrow) RawEvent[kRingSize];
    if (ts->slots == nullptr) {
      ts->dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  const uint64_t h = ts->head.load(std::memory_order_relaxed);
  if (h - ts->tail.load(std::memory_order_acquire) >= kRingSize) {
    ts->dropped.fetch_add(1, std::memory_order_relaxed);
  } else {
    ts->slots[h & (kRingSize - 1)] = *event;
    ts->head.store(h + 1, std::memory_order_release);
  }
  if (writer_state_.load(std::memory_order_acquire) == kNotStarted) EnsureWriter();
}

void Agent::SetCudaFacts(std::string gpu, std::string driver, std::string cuda) {
  std::lock_guard<std::mutex> lock(facts_mu_);
  if (!gpu.empty()) gpu_ = std::move(gpu);
  if (!driver.empty()) driver_ = std::move(driver);
  if (!cuda.empty()) cuda_ = std::move(cuda);
}

uint64_t Agent::DroppedTotal() {
  uint64_t total = dropped_retired_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (ThreadState* ts = threads_; ts != nullptr; ts = ts->next) {
    total += ts->dropped.load(std::memory_order_relaxed);
  }
  return total;
}

void Agent::DrainRings(std::vector<RawEvent>* out) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  ThreadState** link = &threads_;
  while (*link != nullptr) {
    ThreadState* ts = *link;
    uint64_t t = ts->tail.load(std::memory_order_relaxed);
    const uint64_t h = ts->head.load(std::memory_order_acquire);
    for (; t < h; ++t) out->push_back(ts->slots[t & (kRingSize - 1)]);
    ts->tail.store(h, std::memory_order_release);
    if (ts->retired.load(std::memory_order_acquire) &&
        ts->head.load(std::memory_order_acquire) == h) {
      *link = ts->next;
      dropped_retired_.fetch_add(ts->dropped.load(std::memory_order_relaxed),
                                 std::memory_order_relaxed);
      delete[] ts->slots;
      delete ts;
      continue;
    }
    link = &ts->next;
  }
}

void Agent::EnsureWriter() {
  if (!enabled() || writer_state_.load(std::memory_order_acquire) != kNotStarted) return;
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (writer_state_.load(std::memory_order_acquire) != kNotStarted) return;
  StartWriterLocked();
}

void Agent::StartWriterLocked() {
  writer_state_.store(kRunning, std::memory_order_release);
  sigset_t previous;
  const bool blocked = BlockAllSignals(&previous);  // the writer inherits a fully blocked mask
  const int rc = pthread_create(
      &writer_thread_, nullptr,
      [](void* self) -> void* {
        static_cast<Agent*>(self)->WriterMain();
        return nullptr;
      },
      this);
  if (blocked) pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (rc != 0) {
    writer_state_.store(kFailed, std::memory_order_release);
    Warn(std::string("cannot start the trace writer: ") + std::strerror(rc) + "; recording stops");
    return;
  }
  // Wait (at most 1 s, once per process) until the thread is past its start-up, so that a fork()
  // right after the first event never copies a thread caught inside its runtime's start-up
  // allocations (allocators without fork handlers, e.g. a sanitizer's).
  for (int i = 0; i < 10000 && !writer_started_.load(std::memory_order_acquire); ++i) {
    timespec t{0, 100'000};
    ::nanosleep(&t, nullptr);
  }
}

void Agent::WriterMain() {
  prctl(PR_SET_NAME, "fp8audit-writer", 0, 0, 0);
  writer_started_.store(true, std::memory_order_release);
  Writer* writer = nullptr;
  {
    std::lock_guard<std::mutex> lock(cycle_mu_);
    // Never freed: a forked child abandons it without touching it.
    writer = new Writer(*this);
    writer_ = writer;
    if (!writer->Open()) {
      writer_state_.store(kFailed, std::memory_order_release);
      return;
    }
  }
  for (;;) {
    if (!stop_.load(std::memory_order_acquire) && flush_request_.load(std::memory_order_acquire) ==
                                                      flush_done_.load(std::memory_order_relaxed)) {
      pollfd p{wake_fd_[0], POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(kFlushPeriodMs));
      char drain[64];
      while (::read(wake_fd_[0], drain, sizeof(drain)) > 0) {
      }
    }
    const bool stop = stop_.load(std::memory_order_acquire);
    const uint32_t request = flush_request_.load(std::memory_order_acquire);
    const bool requested = request != flush_done_.load(std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      writer->Cycle(stop || requested, stop);
    }
    if (!stop && writer->fail_fast_now()) {
      std::lock_guard<std::mutex> lock(cycle_mu_);
      writer->Cycle(true, true);
      Warn(writer->live().first_failure() + "; ending the job (--fail-fast)");
      ::_exit(3);
    }
    if (requested) flush_done_.store(request, std::memory_order_release);
    if (stop) break;
  }
  const LiveCheck& live = writer->live();
  if (live.failed() && config_.fail_fast) {
    Warn(live.first_failure() + "; ending the job (--fail-fast)");
    fail_fast_exit_.store(true, std::memory_order_release);
  } else if (live.failed()) {
    Warn("live check: " + std::to_string(live.failing()) + " of " +
         std::to_string(live.microbatches()) + " microbatches failed, first " +
         live.first_failure() + " (trace " + writer->path() + ")");
  }
  writer_state_.store(kStopped, std::memory_order_release);
}

void Agent::Shutdown() {
  if (!enabled()) return;
  if (writer_state_.load(std::memory_order_acquire) == kRunning) {
    stop_.store(true, std::memory_order_release);
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_[1], &b, 1);
    pthread_join(writer_thread_, nullptr);
  }
  writer_state_.store(kStopped, std::memory_order_release);
  if (fail_fast_exit_.load(std::memory_order_acquire)) ::_exit(3);
}

void Agent::RequestFlushFromSignal(bool final) {
  if (writer_state_.load(std::memory_order_acquire) != kRunning) return;
  uint32_t target = 0;
  if (final) {
    stop_.store(true, std::memory_order_release);
  } else {
    target = flush_request_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_[1], &b, 1);
  for (int i = 0; i < 200; ++i) {  // at most 2 s
    if (final ? writer_state_.load(std::memory_order_acquire) != kRunning
              : flush_done_.load(std::memory_order_acquire) == target) {
      return;
    }
    timespec ten_ms{0, 10'000'000};
    ::nanosleep(&ten_ms, nullptr);
  }
}

void Agent::OnSignal(int sig, siginfo_t* info, void* context) {
  Agent& a = Get();
  const int saved_errno = errno;
  const struct sigaction prev = a.previous_[sig];
  const bool plain = !(prev.sa_flags & SA_SIGINFO);
  const bool to_default = plain && prev.sa_handler == SIG_DFL;
  if (!a.in_signal_.exchange(true)) {
    a.RequestFlushFromSignal(to_default);
    a.in_signal_.store(false);
  }
  if (to_default) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
  } else if (!plain) {
    prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

void Agent::ForkPrepare() {
  Agent& a = Get();
  if (!a.enabled()) return;
  a.cycle_mu_.lock();
  a.writer_mu_.lock();
  a.registry_mu_.lock();
  a.facts_mu_.lock();
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = 0; i < n; ++i) g_fork_mutexes[i]->lock();
}

// Releases, in reverse order, what ForkPrepare took.
void Agent::ForkRelease(Agent& a) {
  const int n = std::min(g_fork_mutex_count.load(), 8);
  for (int i = n; i-- > 0;) g_fork_mutexes[i]->unlock();
  a.facts_mu_.unlock();
  a.registry_mu_.unlock();
  a.writer_mu_.unlock();
  a.cycle_mu_.unlock();
}

void Agent::ForkParent() {
  Agent& a = Get();
  if (!a.enabled()) return;
  ForkRelease(a);
}

void Agent::ForkChild() {
  Agent& a = Get();
  if (!a.enabled()) return;
  ForkRelease(a);

  a.parent_pid_ = a.pid_;
  a.pid_ = static_cast<uint32_t>(::getpid());
  // The parent's writer thread does not exist here; its file stays the parent's. A new writer
  // (and file <host>.<pid>...) starts at this process's first event.
  if (a.writer_ != nullptr) a.abandoned_writer_ = a.writer_;
  a.writer_ = nullptr;
  a.writer_state_.store(kNotStarted, std::memory_order_release);
  a.stop_.store(false);
  a.flush_request_.store(0);
  a.flush_done_.store(0);
  a.fail_fast_exit_.store(false);
  a.writer_started_.store(false);
  a.in_signal_.store(false);
  ::close(a.wake_fd_[0]);
  ::close(a.wake_fd_[1]);
  if (::pipe2(a.wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0) a.writer_state_.store(kFailed);
  // Only the forking thread exists here; other threads' buffers hold the parent's events.
  ThreadState* self = t_self;
  for (ThreadState* ts = a.threads_; ts != nullptr;) {
    ThreadState* next = ts->next;
    if (ts != self) {
      ts->next = a.abandoned_;
      a.abandoned_ = ts;
    }
    ts = next;
  }
  a.threads_ = nullptr;
  if (self != nullptr) {
    self->next = nullptr;
    self->head.store(0);
    self->tail.store(0);
    self->dropped.store(0);
    self->tid = CurrentTid();
    a.threads_ = self;
  }
  a.dropped_retired_.store(0);
  a.launches_.store(0);
  a.phase_.store(kPassForward);
  a.training_tid_.store(self != nullptr && self->role == Role::kTraining ? self->tid : 0);
}

}  // namespace fp8audit::agent
