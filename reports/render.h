// Renderers of an AuditReport: text (terminals), markdown, JSON (protobuf's printer), JUnit XML,
// one self-contained HTML page, and the short summary `fp8audit check` prints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

enum class Format { kText, kMarkdown, kJson, kJunit, kHtml };

// "text", "markdown" (or "md"), "json", "junit", "html".
bool ParseFormat(std::string_view name, Format* format);

struct RenderOptions {
  // Text and markdown: the most microbatch rows and violations shown per rank (0: all). A rank with
  // more microbatches than this shows its failing ones only, then a summary line. JSON and JUnit
  // always render everything the report holds.
  uint32_t max_rows = 50;
  // Text, markdown and HTML: context lines shown per violation (0: all).
  uint32_t max_context_lines = 12;
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

// Any format; false (and `error`) only when JSON printing fails.
bool Render(const v1::AuditReport& report, Format format, const RenderOptions& options,
            std::string* out, std::string* error);

}  // namespace fp8audit::reports
