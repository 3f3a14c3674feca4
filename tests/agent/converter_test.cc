#include "agent/src/converter.h"

#include <gtest/gtest.h>

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

FunctionInfo* Bulk() {
  static FunctionInfo* fi = [] {
    auto* f = new FunctionInfo();
    f->name = "transformer_engine::delayed_scaling_recipe::kernel_bulk(float)";
    f->event = RuleEvent::kUpdate;
    f->scaled_max_param = 0;
    return f;
  }();
  return fi;
}

uint64_t g_ts = 1000;

RawEvent Update(ScaledMax sm, uint8_t pass, RuleEvent rule = RuleEvent::kUpdate) {
  RawEvent e;
  e.ts_ns = g_ts++;
  e.kind = RawKind::kKernelUpdate;
  e.fn = Bulk();
  e.rule = rule;
  e.scaled_max = sm;
  e.pass = pass;
  return e;
}
RawEvent Boundary(RawKind kind) {
  RawEvent e;
  e.ts_ns = g_ts++;
  e.kind = kind;
  e.pass = kind == RawKind::kBackwardBegin ? kPassBackward : kPassForward;
  return e;
}

std::vector<v1::EventKind> Convert(EventConverter* c, const std::vector<RawEvent>& raws,
                                   bool flush = true) {
  std::vector<v1::Event> out;
  for (const auto& r : raws) c->Push(r, &out);
  if (flush) c->Flush(&out);
  std::vector<v1::EventKind> kinds;
  for (const auto& e : out) kinds.push_back(e.kind());
  return kinds;
}

using K = std::vector<v1::EventKind>;

TEST(AgentConverter, HybridRecomputeUpdateIsForwardOnceE5M2Shows) {
  // First microbatch under HYBRID with reentrant checkpointing: the recompute's forward update
  // (448, on the autograd thread) comes before any E5M2 update; it is held, then released as
  // forward when the backward update (57344) arrives.
  EventConverter c(FormatHint::kAuto);
  std::vector<v1::Event> out;
  c.Push(Update(ScaledMax::kE4M3, kPassForward), &out);
  c.Push(Boundary(RawKind::kBackwardBegin), &out);
  c.Push(Update(ScaledMax::kE4M3, kPassBackward), &out);
  EXPECT_EQ(c.held(), 1u);
  EXPECT_EQ(out.size(), 2u);
  c.Push(Update(ScaledMax::kE5M2, kPassBackward), &out);
  EXPECT_EQ(c.held(), 0u);
  c.Push(Boundary(RawKind::kBackwardEnd), &out);
  c.Push(Update(ScaledMax::kE4M3, kPassBackward), &out);  // known HYBRID now: not held
  EXPECT_EQ(c.held(), 0u);
  K kinds;
  for (const auto& e : out) kinds.push_back(e.kind());
  EXPECT_EQ(kinds, (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_FORWARD,
                      v1::UPDATE_BACKWARD, v1::BACKWARD_END, v1::UPDATE_FORWARD}));
  // Order and pass are kept.
  EXPECT_LT(out[2].timestamp_ns(), out[3].timestamp_ns());
  EXPECT_EQ(out[2].pass(), v1::BACKWARD);
  EXPECT_EQ(out[2].detail(), Bulk()->name);
  EXPECT_EQ(out[2].source(), v1::KERNEL);
}

TEST(AgentConverter, E4M3OnlyBackwardUpdatesFollowThePassAtBackwardEnd) {
  EventConverter c(FormatHint::kAuto);
  EXPECT_EQ(Convert(&c,
                    {Update(ScaledMax::kE4M3, kPassForward), Boundary(RawKind::kBackwardBegin),
                     Update(ScaledMax::kE4M3, kPassBackward), Boundary(RawKind::kBackwardEnd)},
                    false),
            (K{v1::UPDATE_FORWARD, v1::BACKWARD_BEGIN, v1::UPDATE_BACKWARD, v1::BACKWARD_END}));
  EXPECT_FALSE(c.seen_e5m2());
}

TEST(AgentConverter, FormatHintsDecideWithoutHolding) {
  EventConverter hybrid(FormatHint::kHybrid);
  EXPECT_EQ(Convert(&hybrid, {Update(ScaledMax::kE4M3, kPassBackward)}, false),
            (K{v1::UPDATE_FORWARD}));
  EventConverter e4m3(FormatHint::kE4M3);
  EXPECT_EQ(
      Convert(&e4m3,
              {Update(ScaledMax::kE4M3, kPassBackward), Update(ScaledMax::kE5M2, kPassForward)},
              false),
      (K{v1::UPDATE_BACKWARD, v1::UPDATE_BACKWARD}));
}

TEST(AgentConverter, UnreadableOrOtherValuesFollowThePass) {
  EventConverter c(FormatHint::kAuto);
  EXPECT_EQ(Convert(&c, {Update(ScaledMax::kNotRead, kPassForward),
                         Update(ScaledMax::kOther, kPassBackward),
                         Update(ScaledMax::kNotRead, kPassUnspecified)}),
            (K{v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD, v1::UPDATE}));
}

TEST(AgentConverter, ExplicitRulesWin) {
  EventConverter c(FormatHint::kAuto);
  EXPECT_EQ(Convert(&c, {Update(ScaledMax::kE5M2, kPassBackward, RuleEvent::kUpdateForward),
                         Update(ScaledMax::kE4M3, kPassForward, RuleEvent::kUpdateBackward)}),
            (K{v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD}));
}

TEST(AgentConverter, HeldEventsAreReleasedByFlushTickAndLimit) {
  EventConverter c(FormatHint::kAuto);
  std::vector<v1::Event> out;
  c.Push(Update(ScaledMax::kE4M3, kPassBackward), &out);
  c.Tick(g_ts + EventConverter::kMaxHoldNs / 2, &out);
  EXPECT_EQ(c.held(), 1u);
  c.Tick(g_ts + EventConverter::kMaxHoldNs + 10, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind(), v1::UPDATE_BACKWARD);

  out.clear();
  c.Push(Update(ScaledMax::kE4M3, kPassBackward), &out);
  for (size_t i = 1; i < EventConverter::kMaxHeld; ++i) c.Push(Boundary(RawKind::kStep), &out);
  EXPECT_EQ(c.held(), 0u);
  EXPECT_EQ(out.size(), EventConverter::kMaxHeld);
}

TEST(AgentConverter, MarkersAndStructuredMessages) {
  EventConverter c(FormatHint::kAuto);
  RawEvent begin = Boundary(RawKind::kMicrobatchBegin);
  begin.SetText("fp8audit.microbatch");
  RawEvent structured;
  structured.kind = RawKind::kStructured;
  structured.ts_ns = g_ts++;
  structured.pass = kPassBackward;
  structured.tid = 77;
  structured.launches = 12;
  structured.SetText("stash.pop frame=2 module=fc1");
  RawEvent junk = structured;
  junk.SetText("not an event");
  std::vector<v1::Event> out;
  c.Push(begin, &out);
  c.Push(structured, &out);
  c.Push(junk, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind(), v1::MICROBATCH_BEGIN);
  EXPECT_EQ(out[0].detail(), "fp8audit.microbatch");
  EXPECT_EQ(out[0].source(), v1::NVTX);
  EXPECT_EQ(out[1].kind(), v1::STASH_POP);
  EXPECT_EQ(out[1].frame(), 2u);
  EXPECT_EQ(out[1].module(), "fc1");
  EXPECT_EQ(out[1].thread_id(), 77u);
  EXPECT_EQ(out[1].kernel_launches(), 12u);
  EXPECT_EQ(out[1].pass(), v1::BACKWARD);
}

}  // namespace
}  // namespace fp8audit::agent
