#include "agent/src/converter.h"

#include <gtest/gtest.h>

#include "agent/src/writer.h"
#include "proto/text_escape.h"

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

TEST(AgentConverter, AMicrobatchRangeNamingItsMicrobatchKeepsTheIdAndOneNamingNoneHasNone) {
  EventConverter c(FormatHint::kAuto);
  RawEvent keyed = Boundary(RawKind::kMicrobatchBegin);
  keyed.SetText("fp8audit.microbatch id=42");
  RawEvent plain = Boundary(RawKind::kMicrobatchBegin);
  plain.SetText("fp8audit.microbatch");
  RawEvent bad = Boundary(RawKind::kMicrobatchBegin);
  bad.SetText("fp8audit.microbatch id=seven");
  std::vector<v1::Event> out;
  for (const RawEvent& e : {keyed, plain, bad}) c.Push(e, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].kind(), v1::MICROBATCH_BEGIN);
  ASSERT_TRUE(out[0].has_microbatch_id());
  EXPECT_EQ(out[0].microbatch_id(), 42u);
  EXPECT_EQ(out[0].detail(), "fp8audit.microbatch id=42");
  EXPECT_FALSE(out[1].has_microbatch_id());
  EXPECT_FALSE(out[2].has_microbatch_id());
}

TEST(AgentConverter, KernelNamesAndMessagesThatAreNotUtf8AreEscapedAndMarked) {
  FunctionInfo odd;
  odd.name = "my_kernel<\xff\\>";
  odd.event = RuleEvent::kUpdateForward;
  RawEvent k = Update(ScaledMax::kNotRead, kPassForward, RuleEvent::kUpdateForward);
  k.fn = &odd;
  RawEvent m;
  m.ts_ns = g_ts++;
  m.kind = RawKind::kStructured;
  m.SetText("module.forward module=l\xc3");
  RawEvent plain = Boundary(RawKind::kBackwardBegin);
  plain.SetText("launch on an autograd thread");
  EventConverter c(FormatHint::kAuto);
  std::vector<v1::Event> out;
  for (const RawEvent& r : {k, m, plain}) c.Push(r, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].detail(), "my_kernel<\\xff\\\\>");
  EXPECT_EQ(out[0].escaped_fields(), 1u << v1::Event::kDetailFieldNumber);
  EXPECT_EQ(out[1].kind(), v1::MODULE_FORWARD);
  EXPECT_EQ(out[1].module(), "l\\xc3");
  EXPECT_EQ(out[1].escaped_fields(),
            (1u << v1::Event::kDetailFieldNumber) | (1u << v1::Event::kModuleFieldNumber));
  EXPECT_EQ(out[2].escaped_fields(), 0u);
  EXPECT_EQ(out[2].detail(), "launch on an autograd thread");
  for (v1::Event& e : out) ASSERT_TRUE(RestoreEscapedFields(&e));
  EXPECT_EQ(out[0].detail(), odd.name);
  EXPECT_EQ(out[1].module(), "l\xc3");
}

TEST(AgentConverter, ATruncatedMessageNeverEndsInsideAUtf8Sequence) {
  std::string text;
  while (text.size() < 300) text += "\xc3\xa9";  // é
  for (size_t shift = 0; shift < 4; ++shift) {
    RawEvent e;
    const std::string s = std::string(shift, 'a') + text;
    e.SetText(s);
    EXPECT_GE(e.Text().size(), sizeof(e.text) - 3) << shift;
    EXPECT_TRUE(IsValidUtf8(e.Text())) << shift;
    EXPECT_EQ(s.compare(0, e.Text().size(), e.Text()), 0);
  }
  RawEvent bytes;  // not UTF-8 to begin with: cut where it falls, the bytes kept
  bytes.SetText(std::string(200, '\xff'));
  EXPECT_EQ(bytes.Text().size(), sizeof(bytes.text));
}

TEST(AgentHeader, EveryFactThatIsNotUtf8IsEscapedAndMarked) {
  Config c;
  CudaFacts facts;
  facts.gpu = "NVIDIA \xff";
  facts.driver = "580 \xfe";
  facts.cuda = "13.0\xc3";
  facts.cupti = "/p\xa0/libcupti.so.13";
  facts.cupti_api_version = 130001;
  const v1::TraceHeader h = MakeTraceHeader(c, "h\xff", 7, 3, {"/bin/x", "\xfe\xff"}, facts);
  using H = v1::TraceHeader;
  for (int field : {H::kHostFieldNumber, H::kCommandFieldNumber, H::kGpuFieldNumber,
                    H::kDriverFieldNumber, H::kCudaFieldNumber, H::kCuptiFieldNumber}) {
    EXPECT_NE(h.escaped_fields() & (uint64_t{1} << field), 0u) << field;
  }
  EXPECT_EQ(h.escaped_fields() & (uint64_t{1} << H::kMarkersFieldNumber), 0u);
  EXPECT_EQ(h.gpu(), "NVIDIA \\xff");
  EXPECT_EQ(h.cupti_api_version(), 130001u);
  EXPECT_EQ(h.pid(), 7u);
  EXPECT_EQ(h.parent_pid(), 3u);
  v1::TraceHeader back = h;
  ASSERT_TRUE(RestoreEscapedFields(&back));
  EXPECT_EQ(back.host(), "h\xff");
  EXPECT_EQ(back.command(1), "\xfe\xff");
  EXPECT_EQ(back.gpu(), facts.gpu);
  EXPECT_EQ(back.driver(), facts.driver);
  EXPECT_EQ(back.cuda(), facts.cuda);
  EXPECT_EQ(back.cupti(), facts.cupti);
}

}  // namespace
}  // namespace fp8audit::agent
