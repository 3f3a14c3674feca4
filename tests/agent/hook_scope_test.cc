// The python-hook probe's marks of TE PR #3456's quantization_backward_scope: "fp8audit.te.scope
// at=enter|exit" becomes one BACKWARD_SCOPE event (context enter or exit, no pass), never an
// update; other spellings are not the hook's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/hook_probe.h"
#include "agent/src/thread_state.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

// Keeps the raw events the probe records on one thread (no pass boundaries: marks open none).
class KeepingSink : public RecordSink {
 public:
  ThreadState* Self() override { return &thread; }
  void Record(ThreadState* ts, RawEvent* e) override {
    e->tid = ts->tid;
    e->ts_ns = ++clock_;
    events.push_back(*e);
  }
  void OnActivity(ThreadState* /*ts*/, const char* /*what*/) override {}
  void CountLaunches(uint64_t /*n*/) override {}
  void EnsureTrace() override {}

  std::vector<v1::Event> Converted() const {
    EventConverter c(FormatHint::kAuto);
    std::vector<v1::Event> out;
    for (const RawEvent& e : events) c.Push(e, &out);
    c.Flush(&out);
    return out;
  }

  ThreadState thread;
  std::vector<RawEvent> events;

 private:
  uint64_t clock_ = 0;
};

TEST(HookProbe, ScopeMarksBecomeBackwardScopeEventsWithTheirSide) {
  KeepingSink sink;
  sink.thread.tid = 7;
  HookProbe hook(&sink);
  EXPECT_TRUE(hook.OnMark(&sink.thread, "fp8audit.te.scope at=enter"));
  EXPECT_TRUE(hook.OnMark(&sink.thread, "fp8audit.te.scope at=exit"));
  EXPECT_FALSE(hook.OnMark(&sink.thread, "fp8audit.te.scopes at=exit"));
  EXPECT_FALSE(IsHookMark("fp8audit.te.scope"));         // no keys: not the hook's
  EXPECT_FALSE(IsTeMark("fp8audit.te.scope at=enter"));  // not TE's import mark
  const auto e = sink.Converted();
  ASSERT_EQ(e.size(), 2u);
  for (const v1::Event& event : e) {
    EXPECT_EQ(event.kind(), v1::BACKWARD_SCOPE);
    EXPECT_EQ(event.source(), v1::PYTHON_HOOK);
    EXPECT_EQ(event.pass(), v1::PASS_UNSPECIFIED);
    EXPECT_EQ(event.thread_id(), 7u);
    EXPECT_EQ(event.count(), 0u);
  }
  EXPECT_EQ(e[0].context(), "enter");
  EXPECT_EQ(e[1].context(), "exit");
}

}  // namespace
}  // namespace fp8audit::agent
