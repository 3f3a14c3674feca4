// Renderers of an AuditReport: text (terminals), markdown, JSON (protobuf's printer), JUnit XML,
// one self-contained HTML page, and the short summary `fp8audit check` prints. Renderers that
// write while the traces are read (StreamRenderer): Chrome Trace Event JSON and metrics lines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp8audit/report.pb.h"
#include "reports/output.h"
#include "reports/trace_set.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

enum class Format { kText, kMarkdown, kJson, kJunit, kHtml, kChromeTrace, kMetrics };

// "text", "markdown" (or "md"), "json", "junit", "html", "chrome-trace", "metrics".
bool ParseFormat(std::string_view name, Format* format);
// Chrome trace and metrics: written while the traces are read (MakeStreamRenderer), not rendered
// from a finished report.
bool IsStreamingFormat(Format format);

struct RenderOptions {
  // Text and markdown: the most microbatch rows and violations shown per rank (0: all). A rank with
  // more microbatches than this shows its failing ones only, then a summary line. JSON and JUnit
  // always render everything the report holds.
  uint32_t max_rows = 50;
  // Text, markdown and HTML: context lines shown per violation (0: all).
  uint32_t max_context_lines = 12;
  // Text and markdown: every violation of each microbatch with its events (context), instead of
  // identical problems collapsed into one finding per cause (RankReport.findings).
  bool verbose = false;
  // HTML: the most timeline columns per rank (microbatches are bucketed beyond this), and the
  // most failing microbatches and violations drilled down per rank (0: all). Past 4 ranks both
  // shrink in proportion, so that the page stays bounded.
  uint32_t html_max_columns = 1000;
  uint32_t html_max_details = 500;
  // JUnit: failing microbatches listed per trace (0: all). Past 10 traces fewer, at least 5 each,
  // so that a job lists about 1,000.
  uint32_t junit_max_failures = 100;
};

std::string RenderText(const v1::AuditReport& report, const RenderOptions& options);
std::string RenderMarkdown(const v1::AuditReport& report, const RenderOptions& options);
// Protobuf's JSON printer, field names as in the .proto; fields at their default value (0, "",
// false) are omitted, as in the proto3 JSON mapping. False (and `error`) only when printing fails.
bool RenderJson(const v1::AuditReport& report, std::string* out, std::string* error);
// JUnit XML for CI servers: one testcase per trace, named by its rank alone ("rank 0", "no rank",
// "rank 0 forked child", "#2" for a second of a name) and timed by its duration; a failing
// trace's failure lists its failing microbatches (junit_max_failures); an incomplete trace is an
// error; when nothing was audited the traces are skipped. A testcase "job" holds what the ranks
// say together. Meant for a report that keeps failing rows (TraceSetOptions::max_rows).
std::string RenderJunit(const v1::AuditReport& report, const RenderOptions& options = {});
// One HTML page without external resources: verdict and totals, each rank's recorder metadata, a
// timeline and an updates chart per rank (bucketed to html_max_columns), the violations with
// their context, and the failing microbatches (capped at html_max_details). Trace strings are
// escaped. Meant for a report that keeps every row (TraceSetOptions::max_rows 0).
std::string RenderHtml(const v1::AuditReport& report, const RenderOptions& options);
// A few lines: the verdict, failing ranks and their first violations.
std::string RenderSummary(const v1::AuditReport& report, uint32_t max_violations);

// Text or a summary for a colour terminal: each verdict word standing alone (PASS, FAIL,
// INCOMPLETE, NOTHING AUDITED) wrapped in ANSI SGR colour (green, bold red, yellow, yellow);
// nothing else changes, so columns stay aligned. The caller decides (a terminal, NO_COLOR unset).
std::string ColorVerdicts(const std::string& text);

// A renderer that writes to its OutputStream while the traces are read: set it as
// TraceSetOptions::observer; its memory does not grow with the traces.
class StreamRenderer : public TraceObserver {
 public:
  // Before reading: the files AuditTraceFiles will read, in its order.
  virtual void Begin(const std::vector<std::string>& files) = 0;
  // After reading: what the audit of the job concluded.
  virtual void Finish(const TraceSetResult& result) = 0;
};

// Chrome Trace Event Format, JSON Object Format (render_chrome_trace.cc says how it is laid out):
// a process per trace named by rank, host and pid; the audit's microbatches and their passes as
// nested slices; a track per recording thread with checkpoint and autocast slices and every FP8
// state update as an instant event (direction, kernel or call, count, the audit's explanation for
// an extra one); the outcome, problems and anything cut to keep the file valid in "otherData".
// Times: microseconds from the first event, the processes of one host on their shared monotonic
// clock, hosts aligned by the start times their traces record (AlignClocks, reports/verdicts.h:
// the trace set hands them over in TraceObserver::OnClocks).
std::unique_ptr<StreamRenderer> MakeChromeTraceRenderer(OutputStream* out);
// One JSON object per line and per microbatch, as each closes: {"rank", "step", "microbatch",
// "forward", "backward", "expected_forward", "expected_backward", "verdict": "PASS"|"FAIL"|"NOTHING
// AUDITED"} (reports/verdict_words.h; rank -1: not a distributed job), traces in reading order;
// for a trace whose header names the agent's probes also "by_source" (the tallies that are not 0,
// as in report.proto) and "probe_notes". "NOTHING AUDITED": the trace's outcome is nothing audited
// (RankReport.outcome). Until
// some microbatch has an update the lines wait for the outcome (at most 16,384 of them, then they
// are written as the audit judged each); chrome-trace's microbatch slices likewise (4,096).
std::unique_ptr<StreamRenderer> MakeMetricsRenderer(OutputStream* out);
// The one for a streaming format; nullptr for another.
std::unique_ptr<StreamRenderer> MakeStreamRenderer(Format format, OutputStream* out);

// Any format but a streaming one; false (and `error`) when JSON printing fails or the format is
// a streaming one.
bool Render(const v1::AuditReport& report, Format format, const RenderOptions& options,
            std::string* out, std::string* error);

}  // namespace fp8audit::reports
