// report_bench: throughput and peak memory of `fp8audit report`'s path (AuditTraceFiles, then the
// renderer) on a generated trace shaped like the agent's: per microbatch an NVTX microbatch range,
// the `fp8audit` NVTX domain's autocast, reentrant checkpoint, stash and module events for every
// layer (original forward, then recompute and module backward on the autograd thread), one
// forward and one backward update kernel, pass boundaries, a step mark every 4 microbatches; every
// event carries the running kernel-launch count. Every --fail-every'th microbatch gets an extra
// forward update during recompute (the te-legacy failure), so failing rows and violations are
// exercised too. --layers 0 leaves the `fp8audit` NVTX domain out: what the agent records from a
// framework that emits none (markers, update kernels, pass boundaries), the extra update then
// right after the backward begins.
//
// Each trace is written to --dir, audited --repeat times, each in a fresh process (fork+exec of
// this binary, so the peak RSS that wait4 reports is the audit's alone), then deleted. The audit
// is AuditTraceFiles with the options `fp8audit report` uses for the format (text: --max-rows 50
// rows and violations kept; json: everything). Columns: audit MB/s by wall clock and by the
// process's CPU time (best run; CPU time is steadier on a shared core), audit plus rendering by
// wall clock, peak RSS after the audit (getrusage in the child) and at exit (wait4). MB = 10^6
// bytes; the file is in the page cache, so the figures are the CPU cost of reading, parsing and
// auditing.
//
// Usage: taskset -c 0 report_bench [--mb 100,1000] [--format text|json|html[:unfolded]|both|all]
// [--fail-every N]
//                                  [--layers N] [--repeat N] [--dir DIR]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fp8audit/nvtx_grammar.h"
#include "proto/trace_io.h"
#include "reports/render.h"
#include "reports/trace_set.h"

namespace {

namespace v1 = ::fp8audit::v1;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMainThread = 381204;
constexpr uint64_t kAutogradThread = 381377;
constexpr const char* kUpdateKernel =
    "_ZN18transformer_engine22delayed_scaling_recipe12_GLOBAL__N_111kernel_bulkEPKfPfS4_S4_"
    "NS1_10AmaxParamsEmfNS1_15AmaxComputeAlgoEf";
constexpr const char* kModules[] = {"self_attention.qkv", "self_attention.proj", "mlp.fc1",
                                    "mlp.fc2"};

struct GenOptions {
  uint64_t bytes = 100'000'000;
  uint32_t layers = 24;
  uint32_t fail_every = 50;
};

// Writes records into `path` through AppendRecord, in 1 MiB chunks.
class ChunkWriter {
 public:
  explicit ChunkWriter(std::unique_ptr<fp8audit::TraceFileWriter> file) : file_(std::move(file)) {}
  bool Add(const v1::TraceRecord& r) {
    fp8audit::AppendRecord(r, &chunk_);
    return chunk_.size() < (1u << 20) || Flush();
  }
  bool Flush() {
    written_ += chunk_.size();
    const bool ok = file_->WriteFramed(chunk_);
    chunk_.clear();
    return ok;
  }
  uint64_t size() const { return written_ + chunk_.size(); }

 private:
  std::unique_ptr<fp8audit::TraceFileWriter> file_;
  std::string chunk_;
  uint64_t written_ = 0;
};

struct Generator {
  ChunkWriter* out = nullptr;
  uint64_t ts = 1'700'000'000'000;
  uint64_t launches = 0;
  uint64_t events = 0;
  v1::TraceRecord record;

  v1::Event* Next(v1::EventKind kind, uint64_t thread, v1::Source source, v1::Pass pass) {
    record.Clear();
    v1::Event* e = record.mutable_event();
    e->set_kind(kind);
    ts += 1700 + (events * 7919) % 900;
    launches += 3 + events % 5;
    e->set_timestamp_ns(ts);
    e->set_thread_id(thread);
    e->set_source(source);
    e->set_pass(pass);
    e->set_kernel_launches(launches);
    return e;
  }
  bool Emit() {
    ++events;
    return out->Add(record);
  }
  bool Structured(v1::EventKind kind, uint64_t thread, v1::Pass pass, const std::string& text) {
    Next(kind, thread, v1::NVTX, pass)->set_detail(text);
    return Emit();
  }
  bool Checkpoint(bool enter, uint64_t frame, uint32_t phase, uint64_t thread, v1::Pass pass) {
    std::string text = std::string(enter ? "checkpoint.enter" : "checkpoint.exit") +
                       " frame=" + std::to_string(frame);
    if (enter) text += " phase=" + std::to_string(phase) + " kind=reentrant";
    v1::Event* e = Next(enter ? v1::CHECKPOINT_ENTER : v1::CHECKPOINT_EXIT, thread, v1::NVTX, pass);
    e->set_detail(text);
    e->set_frame(frame);
    if (enter) {
      e->set_checkpoint_phase(phase);
      e->set_checkpoint_kind(v1::REENTRANT);
    }
    return Emit();
  }
  bool Module(bool forward, const std::string& name, uint64_t thread, v1::Pass pass,
              uint64_t frame) {
    v1::Event* e = Next(forward ? v1::MODULE_FORWARD : v1::MODULE_BACKWARD, thread, v1::NVTX, pass);
    e->set_detail(std::string(forward ? "module.forward" : "module.backward") + " module=" + name);
    e->set_module(name);
    e->set_frame(frame);
    return Emit();
  }
  bool Update(v1::EventKind kind, uint64_t thread, v1::Pass pass) {
    v1::Event* e = Next(kind, thread, v1::KERNEL, pass);
    e->set_detail(kUpdateKernel);
    e->set_count(1);
    return Emit();
  }

  bool Microbatch(uint64_t index, const GenOptions& o) {
    const bool fail = o.fail_every > 0 && index % o.fail_every == o.fail_every - 1;
    bool ok = true;
    ok &= Structured(v1::MICROBATCH_BEGIN, kMainThread, v1::FORWARD,
                     fp8audit::nvtx::kMicrobatchRange);
    const bool nvtx_domain = o.layers > 0;
    if (nvtx_domain) {
      ok &= Structured(v1::AUTOCAST_ENTER, kMainThread, v1::FORWARD, "autocast.enter depth=1");
    }
    for (uint32_t l = 0; l < o.layers; ++l) {
      const uint64_t frame = index * o.layers + l + 1;
      const std::string layer = "layers." + std::to_string(l) + ".";
      ok &= Checkpoint(true, frame, 1, kMainThread, v1::FORWARD);
      ok &= Structured(
          v1::STASH_PUSH, kMainThread, v1::FORWARD,
          "stash.push module=" + layer + kModules[0] + " frame=" + std::to_string(frame));
      for (const char* m : kModules) ok &= Module(true, layer + m, kMainThread, v1::FORWARD, frame);
      ok &= Checkpoint(false, frame, 1, kMainThread, v1::FORWARD);
    }
    ok &= Update(v1::UPDATE_FORWARD, kMainThread, v1::FORWARD);
    if (nvtx_domain) {
      ok &= Structured(v1::AUTOCAST_EXIT, kMainThread, v1::FORWARD, "autocast.exit depth=0");
    }
    Next(v1::BACKWARD_BEGIN, kAutogradThread, v1::KERNEL, v1::BACKWARD)
        ->set_detail("launch on an autograd thread");
    ok &= Emit();
    if (fail && !nvtx_domain) ok &= Update(v1::UPDATE_FORWARD, kAutogradThread, v1::BACKWARD);
    for (uint32_t l = o.layers; l-- > 0;) {
      const uint64_t frame = index * o.layers + l + 1;
      const std::string layer = "layers." + std::to_string(l) + ".";
      ok &= Checkpoint(true, frame, 2, kAutogradThread, v1::BACKWARD);
      ok &=
          Structured(v1::STASH_POP, kAutogradThread, v1::BACKWARD,
                     "stash.pop module=" + layer + kModules[0] + " frame=" + std::to_string(frame));
      for (const char* m : kModules) {
        ok &= Module(true, layer + m, kAutogradThread, v1::BACKWARD, frame);
      }
      if (fail && l == 0) ok &= Update(v1::UPDATE_FORWARD, kAutogradThread, v1::BACKWARD);
      ok &= Checkpoint(false, frame, 2, kAutogradThread, v1::BACKWARD);
      for (int m = 3; m >= 0; --m) {
        ok &= Module(false, layer + kModules[m], kAutogradThread, v1::BACKWARD, 0);
      }
    }
    ok &= Update(v1::UPDATE_BACKWARD, kAutogradThread, v1::BACKWARD);
    Next(v1::BACKWARD_END, kMainThread, v1::KERNEL, v1::FORWARD)
        ->set_detail("launch on the training thread");
    ok &= Emit();
    ok &=
        Structured(v1::MICROBATCH_END, kMainThread, v1::FORWARD, fp8audit::nvtx::kMicrobatchRange);
    if (index % 4 == 3)
      ok &= Structured(v1::STEP, kMainThread, v1::FORWARD, fp8audit::nvtx::kStepMark);
    return ok;
  }
};

int Generate(const std::string& path, const GenOptions& o) {
  std::string error;
  auto file = fp8audit::TraceFileWriter::Create(path, &error);
  if (file == nullptr) {
    std::fprintf(stderr, "report_bench: %s\n", error.c_str());
    return 1;
  }
  ChunkWriter out(std::move(file));
  Generator g;
  g.out = &out;
  v1::TraceRecord header;
  v1::TraceHeader* h = header.mutable_header();
  h->set_schema_version(1);
  h->set_host("gpu-node-017");
  h->set_pid(381204);
  h->set_rank(0);
  for (const char* arg : {"python", "-m", "torch.distributed.run", "train.py", "--fp8"}) {
    h->add_command(arg);
  }
  h->set_agent_version("0.1.0");
  h->set_gpu("NVIDIA H200");
  h->set_markers("nvtx");
  h->set_expect_forward(1);
  h->set_expect_backward(1);
  bool ok = out.Add(header);
  for (uint64_t mb = 0; ok && out.size() < o.bytes; ++mb) ok = g.Microbatch(mb, o);
  v1::TraceRecord footer;
  footer.mutable_footer()->set_events(g.events);
  footer.mutable_footer()->set_kernel_launches(g.launches);
  ok = ok && out.Add(footer) && out.Flush();
  if (!ok) {
    std::fprintf(stderr, "report_bench: cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}

double CpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Audits `path` as `fp8audit report --format FORMAT` does (default --max-rows 50) and prints one
// line: bytes, events, microbatches, failing, audit seconds, render seconds.
// FORMAT:unfolded audits with every row kept (fold_beyond 0), as before identical rows were
// folded past 10,000 microbatches: both side by side in one run.
int Audit(const std::string& path, const std::string& format_arg) {
  namespace r = fp8audit::reports;
  const size_t colon = format_arg.find(':');
  const std::string format_name = format_arg.substr(0, colon);
  const bool unfolded = colon != std::string::npos && format_arg.substr(colon + 1) == "unfolded";
  r::Format format;
  if (!r::ParseFormat(format_name, &format)) return 1;
  // As `fp8audit report` does: JSON and HTML audit every row (identical rows folded past 10,000).
  const bool complete =
      format == r::Format::kJson || format == r::Format::kHtml || format == r::Format::kJunit;
  r::TraceSetOptions options;
  options.max_rows = complete ? 0 : 50;
  options.max_violations = complete ? 0 : 50;
  if (unfolded) options.fold_beyond = 0;
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  const r::TraceSetResult result = r::AuditTraceFiles({path}, options);
  const auto t1 = Clock::now();
  const double c1 = CpuSeconds();
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);  // the peak up to here: reading and auditing, before rendering
  std::string out;
  std::string error;
  if (!r::Render(result.report, format, r::RenderOptions{}, &out, &error)) return 1;
  const auto t2 = Clock::now();
  if (!result.problems.empty()) {
    std::fprintf(stderr, "report_bench: %s\n", result.problems.front().c_str());
    return 1;
  }
  const v1::Totals& t = result.report.totals();
  std::printf("%llu %llu %u %u %.6f %.6f %.6f %zu %ld\n",
              static_cast<unsigned long long>(std::filesystem::file_size(path)),
              static_cast<unsigned long long>(t.events()), t.microbatches(),
              t.failing_microbatches(), std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count(), c1 - c0, out.size(), ru.ru_maxrss);
  return 0;
}

// Runs this binary with `args` in a child; its stdout in `out`, its peak RSS (KiB) in `maxrss_kib`.
bool RunChild(const std::vector<std::string>& args, std::string* out, long* maxrss_kib) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) out->append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  struct rusage ru {};
  if (::wait4(pid, &status, 0, &ru) != pid) return false;
  *maxrss_kib = ru.ru_maxrss;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<uint64_t> ParseList(const char* s) {
  std::vector<uint64_t> v;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    v.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--generate") == 0 && argc == 6) {
    GenOptions o;
    o.bytes = std::strtoull(argv[3], nullptr, 10);
    o.layers = static_cast<uint32_t>(std::atoi(argv[4]));
    o.fail_every = static_cast<uint32_t>(std::atoi(argv[5]));
    return Generate(argv[2], o);
  }
  if (argc == 4 && std::strcmp(argv[1], "--audit") == 0) return Audit(argv[2], argv[3]);

  std::vector<uint64_t> mbs = {100, 1000};
  std::vector<std::string> formats = {"text", "json"};
  uint32_t layers = 24;
  uint32_t fail_every = 50;
  int repeat = 3;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--mb") {
      mbs = ParseList(v);
    } else if (flag == "--format") {
      formats =
          std::strcmp(v, "both") == 0 ? std::vector<std::string>{"text", "json"}
          : std::strcmp(v, "all") == 0
              ? std::vector<std::string>{"text", "json", "json:unfolded", "html", "html:unfolded"}
              : std::vector<std::string>{v};
    } else if (flag == "--layers") {
      layers = static_cast<uint32_t>(std::atoi(v));
    } else if (flag == "--fail-every") {
      fail_every = static_cast<uint32_t>(std::atoi(v));
    } else if (flag == "--repeat") {
      repeat = std::max(1, std::atoi(v));
    } else if (flag == "--dir") {
      dir = v;
    } else {
      std::fprintf(stderr, "report_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }

  std::printf(
      "| input | format | events | microbatches (failing) | audit MB/s | audit MB/s (CPU) "
      "| audit+render MB/s | peak RSS MiB: audit, +render |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  for (uint64_t mb : mbs) {
    const std::string path = dir + "/report_bench." + std::to_string(::getpid()) + ".fp8trace";
    std::string out;
    long rss = 0;
    if (!RunChild({"report_bench", "--generate", path, std::to_string(mb * 1'000'000),
                   std::to_string(layers), std::to_string(fail_every)},
                  &out, &rss)) {
      std::fprintf(stderr, "report_bench: generating %s failed\n", path.c_str());
      ::unlink(path.c_str());
      return 1;
    }
    for (const std::string& format : formats) {
      double best_audit = 1e30, best_total = 1e30, best_cpu = 1e30;
      long peak = 0, peak_audit = 0;
      unsigned long long bytes = 0, events = 0;
      unsigned micro = 0, failing = 0;
      for (int rep = 0; rep < repeat; ++rep) {
        out.clear();
        if (!RunChild({"report_bench", "--audit", path, format}, &out, &rss)) {
          std::fprintf(stderr, "report_bench: auditing %s failed\n", path.c_str());
          ::unlink(path.c_str());
          return 1;
        }
        double audit_s = 0, render_s = 0, cpu_s = 0;
        size_t rendered = 0;
        long audit_rss = 0;
        if (std::sscanf(out.c_str(), "%llu %llu %u %u %lf %lf %lf %zu %ld", &bytes, &events, &micro,
                        &failing, &audit_s, &render_s, &cpu_s, &rendered, &audit_rss) != 9) {
          return 1;
        }
        best_audit = std::min(best_audit, audit_s);
        best_cpu = std::min(best_cpu, cpu_s);
        best_total = std::min(best_total, audit_s + render_s);
        peak = std::max(peak, rss);
        peak_audit = std::max(peak_audit, audit_rss);
      }
      std::printf("| %.0f MB | %s | %llu | %u (%u) | %.0f | %.0f | %.0f | %.1f, %.1f |\n",
                  bytes / 1e6, format.c_str(), events, micro, failing, bytes / 1e6 / best_audit,
                  bytes / 1e6 / best_cpu, bytes / 1e6 / best_total, peak_audit / 1024.0,
                  peak / 1024.0);
      std::fflush(stdout);
    }
    ::unlink(path.c_str());
  }
  return 0;
}
