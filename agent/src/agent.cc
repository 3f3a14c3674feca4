#include "agent/src/agent.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "agent/src/cuda_driver_facts.h"
#include "agent/src/probe_control.h"
#include "agent/src/warn.h"

namespace fp8audit::agent {
namespace {

void AgentAnchor() {}

}  // namespace

Agent& Agent::Get() {
  static Agent* agent = new Agent();
  return *agent;
}

void Agent::Init() {
  std::call_once(init_once_, [this] { InitOnce(); });
}

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
  if (!rings_.Init()) return;
  if (!writer_.Init()) return;
  RingOptions rings;
  rings.on_full = config_.on_full;
  rings_.Configure(rings, &writer_);
  ProbeHost probes;
  probes.sink = this;
  probes.trace_started = [this] { return !writer_.not_started(); };
  probes.classifier = classifier_.get();
  probes.first_function = [] { CollectCudaFactsOnce(); };
  probes.cupti_opened = [this](const std::string& path, uint32_t version) {
    SetCupti(path, version);
  };
  Probes().Init(config_, TeEntryPointsInterposedBy(self_path_), std::move(probes));
  LifecycleCalls calls;
  calls.recording = [] { return Get().enabled(); };
  calls.lock_for_fork = [] { Get().LockForFork(); };
  calls.unlock_after_fork = [] { Get().UnlockAfterFork(); };
  calls.start_afresh_in_child = [] { Get().StartAfresh(); };
  calls.at_exit = [] { Get().Shutdown(); };
  InstallLifecycleHooks(calls);
  enabled_.store(true, std::memory_order_release);
}

ThreadState* Agent::Self() {
  if (ThreadRing* ring = Rings::Current(); ring != nullptr) return static_cast<ThreadState*>(ring);
  if (!enabled()) return nullptr;
  auto* ts = new (std::nothrow) ThreadState();
  if (ts == nullptr) return nullptr;
  ts->tid = CurrentTid();
  char name[17] = {};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && std::strncmp(name, "pt_autograd_", 12) == 0) {
    ts->role = Role::kAutograd;
  }
  rings_.Adopt(ts);
  return ts;
}

void Agent::OnActivity(ThreadState* ts, const char* what) {
  RawEvent boundary;
  if (pass_.OnActivity(ts, what, &boundary)) Record(ts, &boundary);
}

void Agent::Record(ThreadState* ts, RawEvent* event) {
  if (writer_.finished()) return;
  event->ts_ns = MonotonicNs();
  event->tid = ts->tid;
  event->pass = PassOf(ts);
  event->launches = launches();
  rings_.Push(ts, *event);
  // Facts about the process start no trace of their own: they are written with its first event.
  // A hook check given up is one too (a forked child says its parent's again; a child that then
  // records nothing, a data loader's worker, leaves no trace).
  const bool fact = event->kind == RawKind::kTeVersion || event->kind == RawKind::kTePatched ||
                    event->kind == RawKind::kHookUnchecked;
  if (!fact && writer_.not_started()) EnsureWriter();
}

void Agent::SetCudaFacts(std::string gpu, std::string driver, std::string cuda) {
  std::lock_guard<std::mutex> lock(facts_mu_);
  if (!gpu.empty()) facts_.gpu = std::move(gpu);
  if (!driver.empty()) facts_.driver = std::move(driver);
  if (!cuda.empty()) facts_.cuda = std::move(cuda);
}

void CollectCudaFactsOnce() {
  static std::atomic<bool> once{false};
  if (once.load(std::memory_order_acquire) || once.exchange(true)) return;
  CudaDriverFacts facts = CudaDriverFacts::Collect();
  Agent::Get().SetCudaFacts(std::move(facts.gpu), std::move(facts.driver), std::move(facts.cuda));
}

void Agent::SetCupti(std::string path, uint32_t api_version) {
  std::lock_guard<std::mutex> lock(facts_mu_);
  facts_.cupti = std::move(path);
  facts_.cupti_api_version = api_version;
}

CudaFacts Agent::cuda_facts() {
  std::lock_guard<std::mutex> lock(facts_mu_);
  return facts_;
}

uint32_t Agent::probes() const { return Probes().bits(); }

void Agent::OnWriterCycle() {
  Probes().Poll();
  RecordChildrenWithoutAgent();
}

int Agent::Flush(std::string* path) {
  RecordChildrenWithoutAgent();
  if (writer_.not_started() && rings_.Queued()) EnsureWriter();
  return writer_.FlushNow(path);
}

void Agent::Shutdown() {
  if (!enabled()) return;
  RecordChildrenWithoutAgent();
  if (writer_.not_started() && rings_.Queued()) EnsureWriter();  // only facts were recorded
  if (writer_.Stop()) ::_exit(3);
}

void Agent::FinishBeforeImmediateExit() {
  if (static_cast<uint32_t>(::getpid()) != pid_) return;  // a vfork child: the parent's trace
  writer_.FinishBeforeImmediateExit();
}

void Agent::BeforeExec() {
  if (static_cast<uint32_t>(::getpid()) != pid_) return;  // a vfork child: the parent's trace
  writer_.SealForExec();
}

void Agent::AfterFailedExec() {
  if (static_cast<uint32_t>(::getpid()) != pid_) return;
  writer_.UnsealAfterFailedExec();
}

int Agent::NoteChildWithoutAgent(const char* why, const char* path) {
  if (!enabled()) return -1;
  const auto pid = static_cast<uint32_t>(::getpid());
  const int slot = children_.Add(pid, why, path);
  if (pid == pid_) RecordChildrenWithoutAgent();  // not a vfork child: this process's own trace
  return slot;
}

void Agent::RecordChildrenWithoutAgent() {
  if (static_cast<uint32_t>(::getpid()) != pid_) return;
  children_.Drain([this](const std::string& text) {
    ThreadState* ts = Self();
    if (ts == nullptr) return;
    RawEvent e;
    e.kind = RawKind::kChildWithoutAgent;
    e.SetText(text);
    Record(ts, &e);
  });
}

void Agent::LockForFork() {
  writer_.LockForFork();
  rings_.registry_mutex().lock();
  facts_mu_.lock();
}

void Agent::UnlockAfterFork() {
  facts_mu_.unlock();
  rings_.registry_mutex().unlock();
  writer_.UnlockAfterFork();
}

void Agent::StartAfresh() {
  parent_pid_ = pid_;
  pid_ = static_cast<uint32_t>(::getpid());
  writer_.ResetInChild();
  children_.Clear();  // the parent's to record
  // Only the forking thread exists here; other threads' buffers hold the parent's events.
  auto* self = static_cast<ThreadState*>(Rings::Current());
  rings_.ResetInChild(self);
  launches_.store(0);
  pass_.Reset(self != nullptr && self->role == Role::kTraining ? self->tid : 0);
}

}  // namespace fp8audit::agent
