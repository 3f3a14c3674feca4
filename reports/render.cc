#include "reports/render.h"

namespace fp8audit::reports {

bool ParseFormat(std::string_view name, Format* format) {
  if (name == "text") {
    *format = Format::kText;
  } else if (name == "markdown" || name == "md") {
    *format = Format::kMarkdown;
  } else if (name == "json") {
    *format = Format::kJson;
  } else if (name == "junit") {
    *format = Format::kJunit;
  } else if (name == "html") {
    *format = Format::kHtml;
  } else if (name == "chrome-trace") {
    *format = Format::kChromeTrace;
  } else if (name == "metrics") {
    *format = Format::kMetrics;
  } else {
    return false;
  }
  return true;
}

bool IsStreamingFormat(Format format) {
  return format == Format::kChromeTrace || format == Format::kMetrics;
}

std::unique_ptr<StreamRenderer> MakeStreamRenderer(Format format, OutputStream* out) {
  switch (format) {
    case Format::kChromeTrace:
      return MakeChromeTraceRenderer(out);
    case Format::kMetrics:
      return MakeMetricsRenderer(out);
    default:
      return nullptr;
  }
}

bool Render(const v1::AuditReport& report, Format format, const RenderOptions& options,
            std::string* out, std::string* error) {
  switch (format) {
    case Format::kText:
      *out = RenderText(report, options);
      return true;
    case Format::kMarkdown:
      *out = RenderMarkdown(report, options);
      return true;
    case Format::kJson:
      return RenderJson(report, out, error);
    case Format::kJunit:
      *out = RenderJunit(report, options);
      return true;
    case Format::kHtml:
      *out = RenderHtml(report, options);
      return true;
    case Format::kChromeTrace:
    case Format::kMetrics:
      *error = "a streaming format is written while the traces are read (MakeStreamRenderer)";
      return false;
  }
  *error = "unknown format";
  return false;
}

}  // namespace fp8audit::reports
