// The verdict words of every report format (text, markdown, HTML, JUnit, JSON lines of metrics,
// Chrome trace), declared once. What a job, a trace or a microbatch is called is decided by the
// audit (reports/verdicts.h); renderers only print these.
#pragma once

#include <string_view>

namespace fp8audit::reports {

enum class VerdictName {
  kPass,            // judged, and as expected
  kFail,            // judged, with violations
  kIncomplete,      // the audit is partial (a trace damaged, unreadable, a rank missing, ...)
  kNothingAudited,  // not judged: updates were expected and none was recorded
};

inline constexpr std::string_view kWordPass = "PASS";
inline constexpr std::string_view kWordFail = "FAIL";
inline constexpr std::string_view kWordIncomplete = "INCOMPLETE";
inline constexpr std::string_view kWordNothingAudited = "NOTHING AUDITED";

constexpr std::string_view Word(VerdictName v) {
  switch (v) {
    case VerdictName::kPass:
      return kWordPass;
    case VerdictName::kFail:
      return kWordFail;
    case VerdictName::kIncomplete:
      return kWordIncomplete;
    case VerdictName::kNothingAudited:
      return kWordNothingAudited;
  }
  return kWordNothingAudited;
}

// The same word in lower case, without spaces, for markup classes: "pass", "fail", "incomplete",
// "nothing".
constexpr std::string_view ClassName(VerdictName v) {
  switch (v) {
    case VerdictName::kPass:
      return "pass";
    case VerdictName::kFail:
      return "fail";
    case VerdictName::kIncomplete:
      return "incomplete";
    case VerdictName::kNothingAudited:
      return "nothing";
  }
  return "nothing";
}

}  // namespace fp8audit::reports
