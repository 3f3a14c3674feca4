#include "tests/reports/fuzz_target.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "reports/output.h"
#include "reports/render.h"
#include "reports/trace_set.h"
#include "tests/reports/chrome_trace_check.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::testing {
namespace {

// The input as a file the reader can open: an in-memory file where the kernel has them.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("fp8trace", MFD_CLOEXEC);
    if (fd_ >= 0) {
      path_ = "/proc/self/fd/" + std::to_string(fd_);
    } else {
      char name[] = "/tmp/fp8audit-fuzz-XXXXXX";
      fd_ = ::mkstemp(name);
      if (fd_ < 0) std::abort();
      path_ = name;
      unlink_ = true;
    }
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~InputFile() {
    if (unlink_) ::unlink(path_.c_str());
    ::close(fd_);
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  bool unlink_ = false;
  std::string path_;
};

void RenderAll(const v1::AuditReport& report) {
  for (auto format : {reports::Format::kText, reports::Format::kMarkdown, reports::Format::kJson,
                      reports::Format::kJunit}) {
    std::string out;
    std::string error;
    if (!reports::Render(report, format, reports::RenderOptions{}, &out, &error)) std::abort();
  }
  (void)reports::RenderSummary(report, 10);
}

// The formats written while reading, as `fp8audit report` writes them; the chrome trace must stay
// a trace Perfetto can show whatever the input.
void RenderStreaming(const std::string& path) {
  for (auto format : {reports::Format::kChromeTrace, reports::Format::kMetrics}) {
    reports::StringOutput out;
    auto renderer = reports::MakeStreamRenderer(format, &out);
    reports::TraceSetOptions options;
    options.observer = renderer.get();
    options.max_rows = 1;
    options.max_violations = 100;
    renderer->Begin({path});
    renderer->Finish(reports::AuditTraceFiles({path}, options));
    if (format == reports::Format::kChromeTrace) {
      const std::string problem = ChromeTraceProblem(out.text());
      if (!problem.empty()) {
        std::fprintf(stderr, "invalid chrome trace: %s\n", problem.c_str());
        std::abort();
      }
    }
  }
}

}  // namespace

int FuzzTraceInput(const uint8_t* data, size_t size) {
  InputFile file(data, size);
  // Complete (as for JSON and JUnit) and capped (as for text), like the commands.
  reports::TraceSetOptions complete;
  RenderAll(reports::AuditTraceFiles({file.path()}, complete).report);
  reports::TraceSetOptions capped;
  capped.max_rows = 2;
  capped.max_violations = 2;
  capped.max_detailed = 1;
  reports::RenderOptions render;
  render.max_rows = 2;
  (void)reports::RenderText(reports::AuditTraceFiles({file.path()}, capped).report, render);
  RenderStreaming(file.path());
  return 0;
}

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  {
    TraceBuilder t(0, 1, "nvtx");
    t.MarkedMicrobatch().MarkedMicrobatch(2, 3).Step().Footer();
    seeds.push_back(t.Bytes());
  }
  {
    TraceBuilder t;
    t.PlainMicrobatch().Step().PlainMicrobatch(1, 2).Update(v1::UPDATE, 3).Footer(2);
    seeds.push_back(t.Bytes());
  }
  {
    TraceBuilder t(1, 2, "threads");
    const uint64_t th = TraceBuilder::kAutogradThread;
    t.Autocast(true, 1).CheckpointEnter(1, 1).Module(true, "fc1").CheckpointExit(1).Forward();
    t.Autocast(false, 0).BackwardBegin().CheckpointEnter(1, 2, v1::REENTRANT, th);
    t.Update(v1::UPDATE_FORWARD, 0, th).Module(false, "fc1", th).Backward().Backward(2);
    t.CheckpointExit(1, th).Add(v1::STASH_POP, th)->set_failed(true);
    t.BackwardEnd().Add(v1::EXCEPTION);
    seeds.push_back(t.Bytes());  // no footer
  }
  {
    TraceBuilder t(0, 1, "nvtx");
    t.End().Begin().Forward().Begin().End().End();
    std::string bytes = t.Bytes();
    bytes.resize(bytes.size() - 1);  // damaged
    seeds.push_back(bytes);
  }
  {
    // The Python hook's recompute marks: a module recomputed out of FP8, weight caches refreshed
    // under the forward's scale and under a live one after the forward update.
    TraceBuilder t(0, 1, "nvtx");
    t.Begin().Autocast(true, 1).Module(true, "Linear#1").Forward().Autocast(false, 0);
    t.BackwardBegin().Recompute("Linear#1", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
    t.Refresh("Linear#1", "forward", "transformer_engine.checkpoint");
    t.Refresh("Linear#2", "live", "torch.utils.checkpoint").Backward().BackwardEnd().End();
    t.Footer();
    seeds.push_back(t.Bytes());
  }
  {
    // The Python hook's frozen-scale marks: one before the first microbatch (the next one takes
    // it), one inside, the same module again, and one after the last microbatch's end.
    TraceBuilder t(0, 1, "nvtx");
    t.FrozenScale("Linear#1").Begin().FrozenScale("Linear#2").FrozenScale("Linear#1");
    t.Forward().BackwardBegin().Backward().BackwardEnd().End().FrozenScale("").Footer();
    seeds.push_back(t.Bytes());
  }
  {
    // TE PR #3456's backward scope marks: one microbatch inside the scope, one that enters it
    // twice and leaves it once, and an entry never left.
    TraceBuilder t(0, 1, "nvtx");
    t.Begin().Forward().Site("train.py:9 in step").Scope(true).BackwardBegin().Backward();
    t.BackwardEnd().Scope(false).End();
    t.Begin().Forward().Scope(true).Scope(true).BackwardBegin().Backward().BackwardEnd();
    t.Scope(false).End().Scope(true).Footer();
    seeds.push_back(t.Bytes());
  }
  return seeds;
}

}  // namespace fp8audit::testing
