// The formats written while the traces are read: Chrome Trace Event JSON (checked against the
// format as Perfetto reads it, tests/reports/chrome_trace_check.h) and metrics lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reports/event_text.h"
#include "reports/output.h"
#include "reports/render.h"
#include "reports/trace_set.h"
#include "tests/reports/chrome_trace_check.h"
#include "tests/reports/report_fixtures.h"
#include "tests/reports/trace_builder.h"
#include "tests/util/posix_fs.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;
using testing::ChromeTraceProblem;
using testing::Contains;
using testing::OrderedJson;
using testing::TraceBuilder;

constexpr uint64_t kAutograd = TraceBuilder::kAutogradThread;

// Microbatch 0 passes; in microbatch 1 the recompute of checkpoint frames 2 and 1 on the autograd
// thread updates backward state again (2 backward updates, expected 1).
TraceBuilder FailingTrace(int rank, uint32_t pid) {
  TraceBuilder t(rank, pid, "nvtx");
  t.MarkedMicrobatch();
  t.Begin().Forward().BackwardBegin();
  for (uint64_t f = 2; f >= 1; --f) {
    t.CheckpointEnter(f, 2, v1::REENTRANT, kAutograd)
        .Module(true, "fc" + std::to_string(f), kAutograd);
    t.Backward().CheckpointExit(f, kAutograd);
  }
  t.BackwardEnd().End();
  return t;
}

TraceBuilder PassingTrace(int rank, uint32_t pid, int microbatches) {
  TraceBuilder t(rank, pid, "nvtx");
  for (int i = 0; i < microbatches; ++i) t.MarkedMicrobatch();
  return t;
}

class StreamRenderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, TraceBuilder t, bool footer = true) const {
    if (footer) t.Footer();
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(t.Write(p));
    return p;
  }

  // Renders the directory's traces as `fp8audit report --format F` does.
  std::string Render(Format format, TraceSetResult* result = nullptr) const {
    std::vector<std::string> files;
    std::string error;
    EXPECT_TRUE(ExpandTracePaths({dir_.string()}, &files, &error)) << error;
    StringOutput out;
    auto renderer = MakeStreamRenderer(format, &out);
    EXPECT_NE(renderer, nullptr);
    TraceSetOptions options;
    options.observer = renderer.get();
    options.max_rows = 1;
    renderer->Begin(files);
    TraceSetResult r = AuditTraceFiles(files, options);
    renderer->Finish(r);
    if (result != nullptr) *result = std::move(r);
    return out.text();
  }

  // The chrome trace of the directory, checked; fails the test when it is not valid.
  OrderedJson Chrome(TraceSetResult* result = nullptr) const {
    const std::string text = Render(Format::kChromeTrace, result);
    OrderedJson doc;
    const std::string problem = ChromeTraceProblem(text, &doc);
    EXPECT_EQ(problem, "") << text.substr(0, 4000);
    return doc;
  }

  testutil::TempDir tmp_{"fp8audit-stream-"};
  const fs::path dir_{tmp_.path()};
};

std::vector<OrderedJson> Events(const OrderedJson& doc, const std::string& ph,
                                const std::string& cat_prefix = "") {
  std::vector<OrderedJson> out;
  if (!doc.contains("traceEvents")) return out;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != ph) continue;
    if (!cat_prefix.empty() &&
        (!e.contains("cat") || e["cat"].get<std::string>().rfind(cat_prefix, 0) != 0)) {
      continue;
    }
    out.push_back(e);
  }
  return out;
}

// args.name of the metadata event `name` for pid (and tid, when not 0).
std::string MetaName(const OrderedJson& doc, const std::string& name, uint64_t pid,
                     uint64_t tid = 0) {
  if (!doc.contains("traceEvents")) return "<no events>";
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == name && e["pid"] == pid && (tid == 0 || e["tid"] == tid)) {
      return e["args"]["name"];
    }
  }
  return "<none>";
}

double Ts(const OrderedJson& e) { return e["ts"].get<double>(); }
double Dur(const OrderedJson& e) { return e["dur"].get<double>(); }

TEST_F(StreamRenderTest, ChromeTraceIsValidWithAProcessPerRankAndATrackPerThread) {
  Write("testhost.4242.rank0.fp8trace", FailingTrace(0, 4242));
  Write("testhost.5001.rank1.fp8trace", PassingTrace(1, 5001, 2));
  TraceSetResult result;
  const OrderedJson doc = Chrome(&result);
  EXPECT_EQ(result.outcome, Outcome::kViolations);

  // Processes 1 and 2 in reading order, named by rank, host, pid and verdict.
  EXPECT_EQ(MetaName(doc, "process_name", 1), "rank 0 (testhost, pid 4242): FAIL");
  EXPECT_EQ(MetaName(doc, "process_name", 2), "rank 1 (testhost, pid 5001): PASS");
  // Per process: the audit's track (tid = pid) and one per recording thread, named by its role.
  EXPECT_EQ(MetaName(doc, "thread_name", 1, 1), "fp8audit: microbatches and passes");
  std::vector<std::string> names;
  for (const auto& e : Events(doc, "M")) {
    if (e["name"] == "thread_name" && e["pid"] == 1 && e["tid"] != 1) {
      names.push_back(e["args"]["name"]);
      EXPECT_GE(e["tid"].get<uint64_t>(), 1u << 24);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"thread 4242 (training thread)",
                                             "thread 4343 (autograd thread)"}));
  // Thread ids are unique across processes.
  std::set<uint64_t> tids;
  for (const auto& e : Events(doc, "M")) {
    if (e["name"] == "thread_name" && e["tid"] != e["pid"]) {
      EXPECT_TRUE(tids.insert(e["tid"].get<uint64_t>()).second);
    }
  }
  EXPECT_EQ(tids.size(), 4u);
  // Checkpoint frames are B/E slices on the autograd thread (balance is checked by Chrome()).
  EXPECT_EQ(Events(doc, "B", "checkpoint").size(), 2u);
  EXPECT_EQ(Events(doc, "E").size(), 5u);  // the frames, and 3 microbatches' autocast regions
  EXPECT_EQ(doc["otherData"]["outcome"], "FAIL");
  EXPECT_FALSE(doc["otherData"].contains("notes"));
}

TEST_F(StreamRenderTest, EveryUpdateIsAnInstantWithDirectionKernelAndTheAuditsExplanation) {
  Write("testhost.4242.rank0.fp8trace", FailingTrace(0, 4242));
  Write("testhost.5001.rank1.fp8trace", PassingTrace(1, 5001, 2));
  const OrderedJson doc = Chrome();
  const auto updates = Events(doc, "i", "update");
  EXPECT_EQ(updates.size(), 5u + 4u);
  std::vector<OrderedJson> extra;
  for (const auto& u : updates) {
    EXPECT_EQ(u["s"], "t");
    EXPECT_EQ(u["args"]["kernel"], TraceBuilder::kUpdateKernel);
    EXPECT_EQ(u["args"]["count"], 1);
    EXPECT_EQ(u["args"]["event"]["source"], "KERNEL");
    if (u["cat"] == "update,extra") extra.push_back(u);
  }
  ASSERT_EQ(extra.size(), 1u);
  const OrderedJson& x = extra[0];
  EXPECT_EQ(x["name"], "backward update (extra)");
  EXPECT_EQ(x["pid"], 1);
  EXPECT_EQ(MetaName(doc, "thread_name", 1, x["tid"]), "thread 4343 (autograd thread)");
  EXPECT_EQ(x["args"]["microbatch"], 1);
  EXPECT_EQ(x["args"]["direction"], "backward");
  EXPECT_EQ(x["args"]["number"], "2");
  EXPECT_EQ(x["args"]["expected"], 1);
  EXPECT_EQ(x["args"]["extra"], true);
  const std::string why = x["args"]["explanation"];
  EXPECT_TRUE(Contains(why, "during recompute of reentrant checkpoint frame 1")) << why;
  EXPECT_TRUE(Contains(why, "after module fc1")) << why;
  EXPECT_EQ(x["args"]["event"]["kind"], "UPDATE_BACKWARD");
  // Expected updates say so, without an explanation.
  for (const auto& u : updates) {
    if (u["cat"] == "update") {
      EXPECT_EQ(u["args"]["extra"], false);
      EXPECT_FALSE(u["args"].contains("explanation"));
    }
  }
}

TEST_F(StreamRenderTest, MicrobatchesAndTheirPassesAreNestedSlicesWithTheVerdict) {
  Write("testhost.4242.rank0.fp8trace", FailingTrace(0, 4242));
  const OrderedJson doc = Chrome();
  const auto mbs = Events(doc, "X", "microbatch");
  ASSERT_EQ(mbs.size(), 2u);
  // Events 0.25 ms apart from the first (ts 0): microbatch 0 is its 9 events, begin to end;
  // forward until the backward begins (event 5), backward until it ends (event 7).
  EXPECT_EQ(mbs[0]["name"], "microbatch 0 (step 0): PASS");
  EXPECT_EQ(Ts(mbs[0]), 0);
  EXPECT_EQ(Dur(mbs[0]), 2000);
  EXPECT_EQ(mbs[0]["tid"], 1);
  EXPECT_EQ(mbs[1]["name"], "microbatch 1 (step 0): FAIL");
  EXPECT_EQ(mbs[1]["cat"], "microbatch,fail");
  EXPECT_EQ(mbs[1]["args"]["verdict"], "FAIL");
  EXPECT_EQ(mbs[1]["args"]["backward"], 2);
  EXPECT_EQ(mbs[1]["args"]["expected_backward"], 1);
  const std::string why = mbs[1]["args"]["explanations"][0];
  EXPECT_TRUE(Contains(why, "2 backward updates, expected 1: 2 during checkpoint recompute"))
      << why;
  const auto passes = Events(doc, "X", "pass");
  ASSERT_EQ(passes.size(), 4u);
  EXPECT_EQ(passes[0]["name"], "forward");
  EXPECT_EQ(Ts(passes[0]), 0);
  EXPECT_EQ(Dur(passes[0]), 1250);
  EXPECT_EQ(passes[1]["name"], "backward");
  EXPECT_EQ(Ts(passes[1]), 1250);
  EXPECT_EQ(Dur(passes[1]), 500);
  // Microbatch 1 starts at 2.25 ms: forward, backward from 2.75 ms to 5 ms.
  EXPECT_EQ(Ts(mbs[1]), 2250);
  EXPECT_EQ(Ts(passes[2]), 2250);
  EXPECT_EQ(Dur(passes[2]), 500);
  EXPECT_EQ(Ts(passes[3]), 2750);
  EXPECT_EQ(Dur(passes[3]), 2250);
  EXPECT_EQ(Dur(mbs[1]), 3000);
  EXPECT_EQ(passes[3]["args"]["microbatch"], 1);
}

TEST_F(StreamRenderTest, ForwardOnlyMicrobatchIsOneForwardPass) {
  TraceBuilder t(0, 7, "nvtx");
  t.Begin().Forward().End();
  Write("t.fp8trace", t);
  const OrderedJson doc = Chrome();
  const auto passes = Events(doc, "X", "pass");
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0]["name"], "forward");
  EXPECT_EQ(Dur(passes[0]), 500);
}

TEST_F(StreamRenderTest, RanksOfOneHostShareItsClockAndHostsAlignByTheirStartTimes) {
  // One host: rank 1's first event is 1 s after rank 0's on the same monotonic clock.
  TraceBuilder a = PassingTrace(0, 10, 1);
  TraceBuilder b(1, 11, "nvtx");
  b.Wait(1'000'000'000).MarkedMicrobatch();
  Write("a.fp8trace", a);
  Write("b.fp8trace", b);
  OrderedJson doc = Chrome();
  auto mbs = Events(doc, "X", "microbatch");
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(Ts(mbs[0]), 0);
  EXPECT_EQ(Ts(mbs[1]), 1'000'000);
  EXPECT_TRUE(Contains(doc["otherData"]["time"], "share")) << doc["otherData"]["time"];

  // Two hosts: each on its own clock (here 5 s apart); the second started 2 s after the first.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  TraceBuilder c = PassingTrace(0, 10, 1);
  c.header()->set_start_unix_ns(1'700'000'000'000'000'000);
  TraceBuilder d(1, 11, "nvtx");
  d.header()->set_host("otherhost");
  d.header()->set_start_unix_ns(1'700'000'002'000'000'000);
  d.Wait(5'000'000'000).MarkedMicrobatch();
  Write("c.fp8trace", c);
  Write("d.fp8trace", d);
  doc = Chrome();
  mbs = Events(doc, "X", "microbatch");
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(Ts(mbs[0]), 0);
  EXPECT_EQ(Ts(mbs[1]), 2'000'000);
  EXPECT_TRUE(Contains(doc["otherData"]["time"], "2 hosts")) << doc["otherData"]["time"];
}

TEST_F(StreamRenderTest, UnbalancedAndInterleavedRegionsStayNestedAndAreNoted) {
  TraceBuilder t(0, 7, "threads");
  t.CheckpointExit(9);  // an exit without its enter
  t.CheckpointEnter(1, 1).Autocast(true, 1);
  t.CheckpointExit(1);                // closes the autocast region opened inside it
  t.Autocast(false, 0);               // whose own exit then has nothing to close
  t.CheckpointEnter(2, 1).Forward();  // never exited
  Write("t.fp8trace", t);
  const OrderedJson doc = Chrome();
  const auto& notes = doc["otherData"]["notes"];
  std::string all;
  for (const auto& n : notes) all += n.get<std::string>() + "\n";
  EXPECT_TRUE(Contains(all, "1 slices closed at an exit of a slice that enclosed them")) << all;
  EXPECT_TRUE(Contains(all, "2 exits without an open enter")) << all;
  EXPECT_TRUE(Contains(all, "1 slices still open at the end of their trace")) << all;
  EXPECT_EQ(Events(doc, "B").size(), 3u);
  EXPECT_EQ(Events(doc, "E").size(), 3u);
}

TEST_F(StreamRenderTest, TraceTextIsEscapedAndEscapedFieldsAreNamed) {
  TraceBuilder t(0, 7, "nvtx");
  // Stored escaped by the recorder (not UTF-8): shown as stored, and named as escaped.
  t.header()->set_host("node\\xfe01");
  t.header()->set_escaped_fields(1u << v1::TraceHeader::kHostFieldNumber);
  t.header()->set_expect_backward(0);  // a forward pass alone passes
  t.Begin().Module(true, "fc\"1\\</script>\x01\xe2\x80\xa8");
  v1::Event* u = t.Add(v1::UPDATE_FORWARD);
  u->set_source(v1::KERNEL);
  u->set_detail("gemm\\xff_kernel");
  u->set_escaped_fields(1u << v1::Event::kDetailFieldNumber);
  t.End();
  Write("t.fp8trace", t);
  const std::string text = Render(Format::kChromeTrace);
  OrderedJson doc;
  ASSERT_EQ(ChromeTraceProblem(text, &doc), "");
  EXPECT_EQ(MetaName(doc, "process_name", 1), "rank 0 (node\\xfe01, pid 7): PASS");
  const auto updates = Events(doc, "i", "update");
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0]["args"]["kernel"], "gemm\\xff_kernel");
  EXPECT_EQ(updates[0]["args"]["event"]["escaped_fields"], OrderedJson::array({"detail"}));
  bool module_seen = false;
  for (const auto& e : Events(doc, "i", "context")) {
    if (e["args"]["event"]["kind"] != "MODULE_FORWARD") continue;
    module_seen = true;
    // A control character and a line separator: '?'.
    EXPECT_EQ(e["name"], "module forward fc\"1\\</script>??");
    EXPECT_EQ(e["args"]["event"]["module"], "fc\"1\\</script>\x01\xe2\x80\xa8");
  }
  EXPECT_TRUE(module_seen);
  // No raw control character anywhere in the file.
  for (char c : text) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n');
}

TEST_F(StreamRenderTest, ThreadsBeyondTheCapShareOneTrackOfInstants) {
  TraceBuilder t(0, 7, "nvtx");
  t.Begin();
  for (uint64_t th = 0; th < 300; ++th) {
    t.CheckpointEnter(1, 1, v1::REENTRANT, 100000 + th).CheckpointExit(1, 100000 + th);
  }
  t.Forward().End();
  Write("t.fp8trace", t);
  const OrderedJson doc = Chrome();
  size_t tracks = 0;
  bool shared = false;
  for (const auto& e : Events(doc, "M")) {
    if (e["name"] != "thread_name" || e["tid"] == e["pid"]) continue;
    ++tracks;
    if (e["args"]["name"] == "threads beyond the first 256") shared = true;
  }
  EXPECT_EQ(tracks, 257u);
  EXPECT_TRUE(shared);
  EXPECT_EQ(Events(doc, "B").size(), 256u - 1u);  // the main thread's own track is one of them
  std::string all;
  for (const auto& n : doc["otherData"]["notes"]) all += n.get<std::string>();
  EXPECT_TRUE(Contains(all, "more than 256 recording threads")) << all;
}

TEST_F(StreamRenderTest, DamagedAndUnreadableTracesStillGiveAValidFileWithTheirProblems) {
  const std::string cut = Write("a.fp8trace", PassingTrace(0, 1, 2));
  fs::resize_file(cut, fs::file_size(cut) - 3);
  std::ofstream((dir_ / "b.fp8trace").string()).close();  // empty
  TraceSetResult result;
  const OrderedJson doc = Chrome(&result);
  EXPECT_EQ(result.outcome, Outcome::kIncomplete);
  EXPECT_EQ(doc["otherData"]["outcome"], "INCOMPLETE");
  ASSERT_EQ(doc["otherData"]["problems"].size(), result.problems.size());
  EXPECT_TRUE(Contains(doc["otherData"]["problems"][1], "empty trace"));
  EXPECT_TRUE(Contains(MetaName(doc, "process_name", 1), "INCOMPLETE"));
  EXPECT_FALSE(Contains(doc["otherData"]["time"], "hosts")) << doc["otherData"]["time"];
  bool damage = false;
  for (const auto& v : Events(doc, "i", "violation")) {
    if (v["name"] == "violation: trace damaged") damage = v["s"] == "p";
  }
  EXPECT_TRUE(damage);
}

TEST_F(StreamRenderTest, LongTraceStreamsEveryMicrobatchWhileTheReportKeepsNone) {
  Write("t.fp8trace", PassingTrace(0, 7, 5000));
  TraceSetResult result;
  const OrderedJson doc = Chrome(&result);
  EXPECT_EQ(Events(doc, "X", "microbatch").size(), 5000u);
  EXPECT_EQ(Events(doc, "i", "update").size(), 10000u);
  EXPECT_LE(result.report.ranks(0).microbatches_size(), 1);
  EXPECT_EQ(result.report.totals().microbatches(), 5000u);
}

TEST_F(StreamRenderTest, MetricsAreOneJsonLinePerMicrobatch) {
  Write("a.fp8trace", FailingTrace(0, 4242));
  TraceBuilder b(-1, 9, "nvtx");
  b.MarkedMicrobatch().Step().MarkedMicrobatch();
  Write("b.fp8trace", b);
  const std::string text = Render(Format::kMetrics);
  std::vector<nlohmann::ordered_json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::ordered_json::parse(line));
  }
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1].dump(),
            "{\"rank\":0,\"step\":0,\"microbatch\":1,\"forward\":1,\"backward\":2,"
            "\"expected_forward\":1,\"expected_backward\":1,\"verdict\":\"FAIL\"}");
  EXPECT_EQ(lines[0]["verdict"], "PASS");
  EXPECT_EQ(lines[2]["rank"], -1);
  EXPECT_EQ(lines[3]["step"], 1);
  EXPECT_EQ(lines[3]["microbatch"], 1);
}

std::vector<nlohmann::ordered_json> Lines(const std::string& text) {
  std::vector<nlohmann::ordered_json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::ordered_json::parse(line));
  }
  return lines;
}

// A plain PyTorch job's trace: `n` microbatches and not one FP8 state update.
TraceBuilder PlainTrace(int rank, uint32_t pid, int n) {
  TraceBuilder t(rank, pid);
  for (int i = 0; i < n; ++i) t.PlainMicrobatch(0, 0);
  return t;
}

TEST_F(StreamRenderTest, NothingAuditedMicrobatchesAreNotShownFailingInChromeTraceNorMetrics) {
  Write("a.fp8trace", PlainTrace(0, 1, 3));
  Write("b.fp8trace", PlainTrace(1, 2, 3));
  TraceSetResult result;
  const OrderedJson doc = Chrome(&result);
  ASSERT_EQ(result.report.outcome(), v1::AuditReport::OUTCOME_NOTHING_AUDITED);
  const std::vector<OrderedJson> slices = Events(doc, "X", "microbatch");
  EXPECT_EQ(slices.size(), 6u);
  for (const OrderedJson& e : slices) {
    EXPECT_EQ(e["cat"], "microbatch") << e.dump();
    EXPECT_EQ(e["args"]["verdict"], "NOTHING AUDITED") << e.dump();
    EXPECT_TRUE(Contains(e["name"].get<std::string>(), "NOTHING AUDITED")) << e.dump();
  }
  EXPECT_EQ(MetaName(doc, "process_name", 1), "rank 0 (testhost, pid 1): NOTHING AUDITED");
  EXPECT_EQ(MetaName(doc, "process_name", 2), "rank 1 (testhost, pid 2): NOTHING AUDITED");
  EXPECT_FALSE(Contains(doc.dump(), "FAIL")) << doc.dump();
  const std::vector<nlohmann::ordered_json> lines = Lines(Render(Format::kMetrics));
  ASSERT_EQ(lines.size(), 6u);
  for (const auto& line : lines) EXPECT_EQ(line["verdict"], "NOTHING AUDITED") << line.dump();
}

// Every format names a trace's verdict with the same word (reports/verdict_words.h): the passing,
// the failing and the not judged trace each say one word in text, markdown, HTML, JUnit, metrics
// and chrome trace alike.
TEST_F(StreamRenderTest, EveryFormatUsesTheSameVerdictWordForTheSameTrace) {
  struct Case {
    TraceBuilder trace;
    std::string word;
  };
  std::vector<Case> cases = {{PassingTrace(0, 1, 2), "PASS"},
                             {FailingTrace(0, 2), "FAIL"},
                             {PlainTrace(0, 3, 2), "NOTHING AUDITED"}};
  for (Case& c : cases) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Write("a.fp8trace", c.trace);
    TraceSetResult result;
    const OrderedJson doc = Chrome(&result);
    const std::string title = RankTitle(result.report.ranks(0));
    EXPECT_EQ(MetaName(doc, "process_name", 1), title + ": " + c.word);
    EXPECT_EQ(doc["otherData"]["outcome"], c.word);
    // Its microbatches: the failing trace's first passes, its second fails.
    bool said = false;
    for (const auto& line : Lines(Render(Format::kMetrics)))
      said = said || line["verdict"] == c.word;
    EXPECT_TRUE(said) << c.word;
    const std::string text = RenderText(result.report, RenderOptions{});
    EXPECT_TRUE(Contains(text, "== " + title + ": " + c.word + "\n")) << text;
    EXPECT_TRUE(Contains(text, "fp8audit report: " + c.word + ", 1 trace")) << text;
    const std::string md = RenderMarkdown(result.report, RenderOptions{});
    EXPECT_TRUE(Contains(md, "## " + title + ": " + c.word + "\n")) << md;
    const std::string page = RenderHtml(result.report, RenderOptions{});
    EXPECT_TRUE(Contains(page, "<span id=\"verdict\">" + c.word + "</span>")) << page;
    EXPECT_TRUE(Contains(page, "\">" + c.word + "</span></h2>")) << page;
    const std::string xml = RenderJunit(result.report);
    EXPECT_TRUE(Contains(xml, "<property name=\"outcome\" value=\"" + c.word + "\"/>")) << xml;
    EXPECT_TRUE(Contains(xml, "verdict: " + c.word + "\n")) << xml;
  }
}

TEST_F(StreamRenderTest, ARankWithoutUpdatesAmongRanksWithThemStillFailsInChromeTraceAndMetrics) {
  Write("a.fp8trace", PlainTrace(0, 1, 2));  // read first: its rows wait for the first update
  TraceBuilder b(1, 2);
  b.PlainMicrobatch().PlainMicrobatch();
  Write("b.fp8trace", b);
  TraceSetResult result;
  const OrderedJson doc = Chrome(&result);
  ASSERT_EQ(result.report.outcome(), v1::AuditReport::OUTCOME_VIOLATIONS);
  const std::vector<OrderedJson> slices = Events(doc, "X", "microbatch");
  ASSERT_EQ(slices.size(), 4u);
  size_t failing = 0;
  for (const OrderedJson& e : slices) failing += e["cat"] == "microbatch,fail" ? 1 : 0;
  EXPECT_EQ(failing, 2u);
  EXPECT_EQ(MetaName(doc, "process_name", 1), "rank 0 (testhost, pid 1): FAIL");
  const std::vector<nlohmann::ordered_json> lines = Lines(Render(Format::kMetrics));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["rank"], 0);
  EXPECT_EQ(lines[0]["verdict"], "FAIL");
  EXPECT_EQ(lines[1]["verdict"], "FAIL");
  EXPECT_EQ(lines[2]["rank"], 1);
  EXPECT_EQ(lines[2]["verdict"], "PASS");
}

TEST_F(StreamRenderTest, ChromeTraceShowsCrossChecksAndFactsAsInstantsAndWhatEachProbeSaw) {
  Write("testhost.4242.rank0.fp8trace", testing::ProbeTrace(/*patched=*/true));
  const OrderedJson doc = Chrome();
  // Counted updates: 2 TE calls and 1 hook update each way, and one extra TE call.
  EXPECT_EQ(Events(doc, "i", "update").size(), 7u);
  const auto cross = Events(doc, "i", "crosscheck");
  ASSERT_EQ(cross.size(), 4u);
  EXPECT_EQ(cross[0]["name"], "forward update cross-check (python-hook)");
  EXPECT_EQ(cross[0]["args"]["event"]["kind"], "CROSSCHECK_UPDATE_FORWARD");
  const auto facts = Events(doc, "i", "recording");
  ASSERT_EQ(facts.size(), 2u);
  EXPECT_EQ(facts[0]["name"], "TE version 2.20.2");
  EXPECT_EQ(facts[1]["name"], "TE patched 2.20.2, semantics fixed");
  for (const auto& u : Events(doc, "i", "update")) {
    EXPECT_TRUE(u["args"]["probe"] == "te-call" || u["args"]["probe"] == "python-hook") << u.dump();
  }
  const auto mbs = Events(doc, "X", "microbatch");
  ASSERT_EQ(mbs.size(), 3u);
  EXPECT_EQ(mbs[1]["args"]["by_source"]["te_call"]["backward"], 2);
  EXPECT_EQ(mbs[1]["args"]["probe_notes"][0],
            "probes disagree on backward updates: te-call 2, python-hook 1 (counted 2)");
  bool labelled = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_labels") {
      const std::string labels = e["args"]["labels"];
      labelled = Contains(labels, "probes te-call, python-hook (--probe auto)") &&
                 Contains(labels, "TE 2.20.2, patched by fp8audit.te (fixed semantics)");
      EXPECT_TRUE(labelled) << labels;
    }
  }
  EXPECT_TRUE(labelled);
}

TEST_F(StreamRenderTest, MetricsOfAProbeAgentsTraceCarryWhatEachProbeSaw) {
  Write("a.fp8trace", testing::ProbeTrace());
  const std::string text = Render(Format::kMetrics);
  std::vector<nlohmann::ordered_json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::ordered_json::parse(line));
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["by_source"].dump(),
            "{\"te_call\":{\"forward\":1,\"backward\":1},\"python_hook\":"
            "{\"crosscheck_forward\":1,\"crosscheck_backward\":1}}");
  EXPECT_FALSE(lines[0].contains("probe_notes"));
  EXPECT_EQ(lines[1]["probe_notes"].size(), 1u);
  EXPECT_EQ(lines[2]["by_source"]["python_hook"]["unfused_backward"], 1);
}

// The check the tests above rely on finds what Perfetto could not show.
// The checker reads timestamps as Perfetto's JSON importer does, in whole nanoseconds: a pass
// that ends where its microbatch ends nests, though 1000 + 499.744 is not 0 + 1499.744 in doubles
// (the fuzzer found this in the checker, not in the renderer's exact decimals).
TEST(ChromeTraceCheck, SlicesEndingAtTheSameNanosecondNest) {
  const std::string meta =
      R"({"ts":0,"ph":"M","pid":1,"tid":1,"name":"process_name","args":{"name":"p"}},)"
      R"({"ts":0,"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{"name":"t"}})";
  const std::string nested =
      R"({"traceEvents":[{"ts":0,"ph":"X","pid":1,"tid":1,"name":"mb","dur":1499.744},)"
      R"({"ts":1000,"ph":"X","pid":1,"tid":1,"name":"bw","dur":499.744},)" +
      meta + "]}";
  EXPECT_EQ(ChromeTraceProblem(nested), "");
  const std::string overlapping =
      R"({"traceEvents":[{"ts":0,"ph":"X","pid":1,"tid":1,"name":"mb","dur":1499.744},)"
      R"({"ts":1000,"ph":"X","pid":1,"tid":1,"name":"bw","dur":499.745},)" +
      meta + "]}";
  EXPECT_NE(ChromeTraceProblem(overlapping).find("overlap without nesting"), std::string::npos);
  // Timestamps past 2^63 ns saturate instead of overflowing (the fuzzer writes such ones).
  const std::string huge =
      R"({"traceEvents":[{"ts":1e300,"ph":"X","pid":1,"tid":1,"name":"mb","dur":1e300},)"
      R"({"ts":9223372036854775,"ph":"X","pid":1,"tid":1,"name":"bw","dur":750},)" +
      meta + "]}";
  EXPECT_EQ(ChromeTraceProblem(huge), "");
}

TEST(ChromeTraceCheck, RejectsWhatPerfettoCannotShow) {
  const std::string names =
      R"({"ts":0,"ph":"M","pid":1,"tid":1,"name":"process_name","args":{"name":"p"}},)"
      R"({"ts":0,"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{"name":"t"}})";
  auto trace = [&](const std::string& events) {
    return R"({"traceEvents":[)" + events + "," + names + "]}";
  };
  const std::string b = R"({"ts":1,"ph":"B","pid":1,"tid":1,"name":"a"})";
  const std::string e = R"({"ts":5,"ph":"E","pid":1,"tid":1})";
  EXPECT_EQ(ChromeTraceProblem(trace(b + "," + e)), "");
  EXPECT_TRUE(Contains(ChromeTraceProblem(trace(b)), "B without E"));
  EXPECT_TRUE(Contains(ChromeTraceProblem(trace(e)), "E without a B"));
  EXPECT_TRUE(
      Contains(ChromeTraceProblem(trace(R"({"ts":0,"ph":"X","pid":1,"tid":1,"dur":5,"name":"a"},)"
                                        R"({"ts":3,"ph":"X","pid":1,"tid":1,"dur":5,"name":"b"})")),
               "overlap without nesting"));
  EXPECT_EQ(ChromeTraceProblem(trace(R"({"ts":0,"ph":"X","pid":1,"tid":1,"dur":5,"name":"a"},)"
                                     R"({"ts":1,"ph":"X","pid":1,"tid":1,"dur":4,"name":"b"})")),
            "");
  EXPECT_TRUE(Contains(ChromeTraceProblem(trace(R"({"ph":"i","ts":1,"pid":1,"tid":1,"s":"t"})")),
                       "\"ts\" is not its first key"));
  EXPECT_TRUE(Contains(ChromeTraceProblem(trace(R"({"ts":1,"ph":"i","pid":1,"tid":2,"s":"t",)"
                                                R"("name":"x"})")),
                       "thread 2 has no name"));
  EXPECT_TRUE(Contains(ChromeTraceProblem(trace(R"({"ts":1,"ph":"i","pid":1,"tid":1,"name":"x"})")),
                       "scope"));
  EXPECT_TRUE(Contains(ChromeTraceProblem(R"({"traceEvents":[],"extra":1})"), "top-level key"));
  EXPECT_EQ(ChromeTraceProblem(R"({"traceEvents":[)"), "not JSON");
}

TEST(StreamFormats, NamesAndWhatRenderSaysOfThem) {
  Format f = Format::kText;
  EXPECT_TRUE(ParseFormat("chrome-trace", &f));
  EXPECT_EQ(f, Format::kChromeTrace);
  EXPECT_TRUE(IsStreamingFormat(f));
  EXPECT_TRUE(ParseFormat("metrics", &f));
  EXPECT_EQ(f, Format::kMetrics);
  EXPECT_FALSE(IsStreamingFormat(Format::kJson));
  std::string out, error;
  EXPECT_FALSE(Render(v1::AuditReport(), Format::kMetrics, RenderOptions{}, &out, &error));
  EXPECT_TRUE(Contains(error, "streaming"));
  StringOutput sink;
  EXPECT_EQ(MakeStreamRenderer(Format::kHtml, &sink), nullptr);
}

}  // namespace
}  // namespace fp8audit::reports
