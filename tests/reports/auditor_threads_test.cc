// Microbatches of several threads open at once (each thread marking its own, as `with
// fp8audit.microbatch()` in every thread of a pool does): each thread's events count in its own
// microbatch, whatever the interleaving, and a thread that begins again without ending is still
// unbalanced.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reports/auditor.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::TraceBuilder;

constexpr uint64_t kThread[] = {101, 102, 103};

v1::Event* Begin(TraceBuilder* t, uint64_t thread) {
  v1::Event* e = t->Add(v1::MICROBATCH_BEGIN, thread);
  e->set_source(v1::NVTX);
  e->set_detail("fp8audit.microbatch");
  return e;
}

void End(TraceBuilder* t, uint64_t thread) {
  t->Add(v1::MICROBATCH_END, thread)->set_source(v1::NVTX);
}

void Update(TraceBuilder* t, v1::EventKind kind, uint64_t thread) { t->Update(kind, 0, thread); }

std::vector<std::string> Messages(const v1::RankReport& r) {
  std::vector<std::string> out;
  for (const v1::Violation& v : r.violations()) out.push_back(v.message());
  return out;
}

// Three threads, each beginning its microbatch before any ends: begin all, then each thread's
// forward update, its backward update and its end, in turn. `extra`: thread 1 makes a second
// forward update.
TraceBuilder Interleaved(int rounds, bool extra) {
  TraceBuilder t(0, 1000, "nvtx");
  for (int round = 0; round < rounds; ++round) {
    for (uint64_t thread : kThread) Begin(&t, thread);
    for (uint64_t thread : kThread) Update(&t, v1::UPDATE_FORWARD, thread);
    if (extra && round == 1) Update(&t, v1::UPDATE_FORWARD, kThread[1]);
    for (uint64_t thread : {kThread[2], kThread[0], kThread[1]}) {
      Update(&t, v1::UPDATE_BACKWARD, thread);
    }
    for (uint64_t thread : {kThread[1], kThread[2], kThread[0]}) End(&t, thread);
  }
  t.Footer();
  return t;
}

TEST(AuditorThreads, MicrobatchesOfSeveralThreadsOpenAtOnceEachCountTheirOwnThreadsUpdates) {
  const v1::RankReport r = Interleaved(4, false).Audit();
  EXPECT_EQ(Messages(r), std::vector<std::string>{});
  EXPECT_EQ(r.totals().microbatches(), 12u);
  EXPECT_EQ(r.totals().failing_microbatches(), 0u);
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    EXPECT_EQ(row.forward_updates(), 1u) << row.index();
    EXPECT_EQ(row.backward_updates(), 1u) << row.index();
  }
  EXPECT_EQ(r.verdict(), v1::PASS);
}

TEST(AuditorThreads, OnlyTheThreadWithAnExtraUpdateFails) {
  const v1::RankReport r = Interleaved(3, true).Audit();
  EXPECT_EQ(r.totals().microbatches(), 9u);
  EXPECT_EQ(r.totals().failing_microbatches(), 1u);
  ASSERT_EQ(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::FORWARD_COUNT);
  int failing = 0;
  for (const v1::MicrobatchResult& row : r.microbatches()) {
    if (row.verdict() != v1::FAIL) continue;
    ++failing;
    EXPECT_EQ(row.forward_updates(), 2u);
    EXPECT_EQ(row.backward_updates(), 1u);
    ASSERT_GT(row.updates_size(), 0);
    for (const v1::Event& e : row.updates()) EXPECT_EQ(e.thread_id(), kThread[1]);
  }
  EXPECT_EQ(failing, 1);
}

TEST(AuditorThreads, AThreadThatBeginsAgainWithoutAnEndIsStillUnbalanced) {
  TraceBuilder t(0, 1000, "nvtx");
  Begin(&t, kThread[0]);
  Begin(&t, kThread[1]);
  Update(&t, v1::UPDATE_FORWARD, kThread[0]);
  Begin(&t, kThread[0]);  // thread 0's first microbatch never ended
  Update(&t, v1::UPDATE_FORWARD, kThread[0]);
  Update(&t, v1::UPDATE_FORWARD, kThread[1]);
  for (uint64_t thread : {kThread[0], kThread[1]}) {
    Update(&t, v1::UPDATE_BACKWARD, thread);
    End(&t, thread);
  }
  t.Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_GE(r.violations_size(), 1);
  EXPECT_EQ(r.violations(0).kind(), v1::Violation::UNBALANCED);
  EXPECT_EQ(r.totals().microbatches(), 3u);
}

TEST(AuditorThreads, UpdatesOfAThreadWithoutMarkersCountInTheMicrobatchLastActive) {
  // One training thread marks microbatches; its backward runs on an autograd thread that marks
  // none: the autograd thread's updates count in the training thread's microbatch, as before.
  TraceBuilder t(0, 1000, "nvtx");
  t.MarkedMicrobatch().MarkedMicrobatch(1, 2).Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 2);
  EXPECT_EQ(r.microbatches(0).verdict(), v1::PASS);
  EXPECT_EQ(r.microbatches(1).backward_updates(), 2u);
  EXPECT_EQ(r.microbatches(1).verdict(), v1::FAIL);
}

}  // namespace
}  // namespace fp8audit::reports
