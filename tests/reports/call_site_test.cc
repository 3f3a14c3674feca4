// Explanations that point into the job's code (issue 35 item 5): the Python hook's CALL_SITE
// events locate the update or recompute after them, and every format shows the site.
#include <gtest/gtest.h>

#include <string>

#include "reports/render.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"

namespace fp8audit::reports {
namespace {

using testing::Contains;
using testing::Job;
using testing::TraceBuilder;

constexpr char kStep[] = "train.py:40 in step";
constexpr char kBlock[] = "models/llama.py:57 in Block.forward";

std::string AllExplanations(const v1::MicrobatchResult& row) {
  std::string out;
  for (const std::string& line : row.explanations()) out += line + "\n";
  return out;
}

// Two forward updates, each as the hook brackets it (site, TE call, the hook's cross-check), the
// second from an autocast the job's Block.forward opened; the backward's site is none.
v1::RankReport TwoForwardUpdates() {
  TraceBuilder t(0, 1000, "nvtx");
  const uint64_t bw = TraceBuilder::kAutogradThread;
  t.Begin().Site(kStep).TeCall(v1::UPDATE_FORWARD).Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1);
  t.Site(kBlock).TeCall(v1::UPDATE_FORWARD).Hook(v1::CROSSCHECK_UPDATE_FORWARD, 1);
  t.BackwardBegin().Site("", bw).TeCall(v1::UPDATE_BACKWARD, bw);
  t.Hook(v1::CROSSCHECK_UPDATE_BACKWARD, 1, 0, bw).BackwardEnd().End().Footer();
  return t.Audit();
}

TEST(CallSite, AnExtraUpdateIsExplainedWithTheLineOfTheJobsCodeItCameFrom) {
  const v1::RankReport r = TwoForwardUpdates();
  ASSERT_EQ(r.microbatches_size(), 1);
  const std::string why = AllExplanations(r.microbatches(0));
  EXPECT_TRUE(Contains(why, std::string("autocast depth 0, Python ") + kBlock + " (thread")) << why;
  EXPECT_FALSE(Contains(why, kStep)) << why;  // the expected update is not explained
}

TEST(CallSite, EveryFormatShowsTheSite) {
  const v1::AuditReport job = Job({TwoForwardUpdates()});
  RenderOptions options;
  for (const Format format :
       {Format::kText, Format::kMarkdown, Format::kJson, Format::kJunit, Format::kHtml}) {
    std::string out, error;
    ASSERT_TRUE(Render(job, format, options, &out, &error)) << error;
    EXPECT_TRUE(Contains(out, "models/llama.py:57 in Block.forward"))
        << static_cast<int>(format) << ":\n"
        << out.substr(0, 4000);
  }
}

TEST(CallSite, ARecomputeInAnotherFp8StateNamesTheLineThatCalledTheModuleOnlyForItself) {
  TraceBuilder t(0, 1000, "nvtx");
  const uint64_t bw = TraceBuilder::kAutogradThread;
  t.Begin().Forward().BackwardBegin();
  t.Site(kBlock, bw).Recompute("Linear#2", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
  t.Recompute("Linear#1", v1::FP8_OFF, v1::FP8_ON, "torch.utils.checkpoint");
  t.Backward().BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  const std::string why = AllExplanations(r.microbatches(0));
  EXPECT_TRUE(Contains(why,
                       "Linear#2 FP8 off in torch.utils.checkpoint, called at models/llama.py:57 "
                       "in Block.forward, Linear#1 FP8 off in torch.utils.checkpoint"))
      << why;
  EXPECT_FALSE(Contains(why, "Linear#1 FP8 off in torch.utils.checkpoint, called at")) << why;
}

TEST(CallSite, AnEmptySiteForgetsThePreviousOne) {
  TraceBuilder t(0, 1000, "nvtx");
  t.Begin().Site(kBlock).Forward().Site("").Forward().BackwardBegin().Backward();
  t.BackwardEnd().End().Footer();
  const v1::RankReport r = t.Audit();
  ASSERT_EQ(r.microbatches_size(), 1);
  const std::string why = AllExplanations(r.microbatches(0));
  EXPECT_TRUE(Contains(why, "forward update 2, expected 1")) << why;
  EXPECT_FALSE(Contains(why, "Python ")) << why;
}

}  // namespace
}  // namespace fp8audit::reports
