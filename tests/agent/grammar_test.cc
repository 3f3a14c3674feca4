// The emitter's messages (proto/fp8audit/nvtx_events.h) parse back in the agent.
#include <gtest/gtest.h>

#include "agent/src/nvtx_parser.h"
#include "fp8audit/nvtx_events.h"

namespace fp8audit::agent {
namespace {

namespace ev = ::fp8audit::nvtx;
namespace v1 = ::fp8audit::v1;

v1::Event Parse(const ev::Message& m) {
  v1::Event e;
  EXPECT_TRUE(ParseStructuredMessage(m.c_str(), &e)) << m.c_str();
  return e;
}

TEST(AgentGrammar, CheckpointKindReadsBothSpellingsOfNonReentrant) {
  EXPECT_STREQ(ev::FormatCheckpoint(true, 1, 1, fp8audit::CheckpointKind::kNonReentrant).c_str(),
               "checkpoint.enter frame=1 phase=1 kind=non-reentrant");
  v1::Event e;
  ASSERT_TRUE(ParseStructuredMessage("checkpoint.enter frame=1 phase=1 kind=non_reentrant", &e));
  EXPECT_EQ(e.checkpoint_kind(), v1::NON_REENTRANT);
  e.Clear();
  ASSERT_TRUE(ParseStructuredMessage("checkpoint.enter frame=1 phase=1 kind=sideways", &e));
  EXPECT_EQ(e.checkpoint_kind(), v1::CHECKPOINT_KIND_UNSPECIFIED);
}

TEST(AgentGrammar, EmitterMessagesRoundTrip) {
  EXPECT_STREQ(ev::FormatCheckpoint(true, 3, 2, fp8audit::CheckpointKind::kReentrant).c_str(),
               "checkpoint.enter frame=3 phase=2 kind=reentrant");
  v1::Event e = Parse(ev::FormatCheckpoint(true, 3, 2, fp8audit::CheckpointKind::kReentrant));
  EXPECT_EQ(e.kind(), v1::CHECKPOINT_ENTER);
  EXPECT_EQ(e.frame(), 3u);
  EXPECT_EQ(e.checkpoint_phase(), 2u);
  EXPECT_EQ(e.checkpoint_kind(), v1::REENTRANT);

  e = Parse(ev::FormatCheckpoint(false, 7, 1, fp8audit::CheckpointKind::kNonReentrant, true));
  EXPECT_EQ(e.kind(), v1::CHECKPOINT_EXIT);
  EXPECT_EQ(e.checkpoint_kind(), v1::NON_REENTRANT);
  EXPECT_TRUE(e.failed());

  e = Parse(ev::FormatAutocastEnter(2));
  EXPECT_EQ(e.kind(), v1::AUTOCAST_ENTER);
  EXPECT_EQ(e.autocast_depth(), 2u);
  e = Parse(ev::FormatAutocastExit(1, true));
  EXPECT_EQ(e.kind(), v1::AUTOCAST_EXIT);
  EXPECT_TRUE(e.failed());

  e = Parse(ev::FormatModule(true, "layers.0 fc=1"));
  EXPECT_EQ(e.kind(), v1::MODULE_FORWARD);
  EXPECT_EQ(e.module(), "layers.0_fc_1");  // spaces and '=' cannot break the grammar
  EXPECT_EQ(Parse(ev::FormatModule(false, "m")).kind(), v1::MODULE_BACKWARD);

  EXPECT_EQ(Parse(ev::FormatUpdate(+1)).kind(), v1::UPDATE_FORWARD);
  EXPECT_EQ(Parse(ev::FormatUpdate(-1)).kind(), v1::UPDATE_BACKWARD);
  e = Parse(ev::FormatUpdate(0, 4));
  EXPECT_EQ(e.kind(), v1::UPDATE);
  EXPECT_EQ(e.count(), 4u);

  e = Parse(ev::FormatStash(true, "fc2", 9));
  EXPECT_EQ(e.kind(), v1::STASH_PUSH);
  EXPECT_EQ(e.module(), "fc2");
  EXPECT_EQ(e.frame(), 9u);
  EXPECT_EQ(Parse(ev::FormatStash(false, "fc2", 9)).kind(), v1::STASH_POP);
}

TEST(AgentGrammar, LongModuleNamesAreCutToTheMessageLimit) {
  const std::string name(500, 'x');
  const ev::Message m = ev::FormatModule(true, name.c_str());
  EXPECT_EQ(std::string(m.c_str()).size(), ev::kMaxMessage - 1);
  EXPECT_EQ(Parse(m).kind(), v1::MODULE_FORWARD);
}

TEST(AgentGrammar, UnknownEventsAreNotEventsAndBadValuesAreIgnored) {
  v1::Event e;
  EXPECT_FALSE(ParseStructuredMessage("", &e));
  EXPECT_FALSE(ParseStructuredMessage("fp8audit.microbatch", &e));
  EXPECT_FALSE(ParseStructuredMessage("update.sideways", &e));
  EXPECT_FALSE(ParseStructuredMessage("updatex", &e));
  ASSERT_TRUE(ParseStructuredMessage(
      "checkpoint.enter frame=99999999999999999999999 phase=x kind=? junk = =1 pass=backward", &e));
  EXPECT_EQ(e.frame(), 0u);
  EXPECT_EQ(e.checkpoint_phase(), 0u);
  EXPECT_EQ(e.pass(), v1::BACKWARD);
}

TEST(AgentGrammar, MicrobatchRangesMayNameTheirLogicalMicrobatch) {
  const std::string range = ev::kMicrobatchRange;
  EXPECT_TRUE(IsMicrobatchRange("fp8audit.microbatch", range));
  EXPECT_TRUE(IsMicrobatchRange(ev::FormatMicrobatch(7).c_str(), range));
  EXPECT_FALSE(IsMicrobatchRange("fp8audit.microbatches", range));
  EXPECT_FALSE(IsMicrobatchRange("fp8audit.micro", range));
  EXPECT_FALSE(IsMicrobatchRange("fp8audit.microbatch", ""));
  uint64_t id = 0;
  EXPECT_STREQ(ev::FormatMicrobatch(18446744073709551615ull).c_str(),
               "fp8audit.microbatch id=18446744073709551615");
  ASSERT_TRUE(ParseMicrobatchId(ev::FormatMicrobatch(18446744073709551615ull).c_str(), &id));
  EXPECT_EQ(id, 18446744073709551615ull);
  ASSERT_TRUE(ParseMicrobatchId("train.mb phase=x id=3", &id));
  EXPECT_EQ(id, 3u);
  EXPECT_FALSE(ParseMicrobatchId("fp8audit.microbatch", &id));
  EXPECT_FALSE(ParseMicrobatchId("fp8audit.microbatch id=", &id));
  EXPECT_FALSE(ParseMicrobatchId("fp8audit.microbatch id=-1", &id));
  EXPECT_FALSE(ParseMicrobatchId("fp8audit.microbatch id=18446744073709551616", &id));
  EXPECT_FALSE(ParseMicrobatchId("fp8audit.microbatch xid=4", &id));
}

}  // namespace
}  // namespace fp8audit::agent
