// What `fp8audit run` writes besides its printed report: report files in other formats
// (--junit, --html, --json, --markdown FILE), checked before the command runs, and the flags of
// fp8audit's own that were placed after CMD (they went to CMD).
#pragma once

#include <string>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::cli {

struct ReportFiles {
  std::string junit, html, json, markdown;
  bool empty() const { return junit.empty() && html.empty() && json.empty() && markdown.empty(); }
};

// False and `error` ("--html PATH: reason") when a named file cannot be written, or when two
// flags name the same file; checked before CMD runs, so a mistake costs no job.
bool CheckReportFiles(const ReportFiles& files, std::string* error);

// Renders the report in each named format and writes it (atomically); one line per file that
// could not be written. True when every file was written.
bool WriteReportFiles(const v1::AuditReport& report, const ReportFiles& files,
                      std::vector<std::string>* errors);

// The arguments after CMD's name that are flags only fp8audit run takes (--fix-te, --probe=te,
// ...), in order: CMD received them, fp8audit did not.
std::vector<std::string> Fp8auditFlagsAfterCommand(const std::vector<std::string>& command);

}  // namespace fp8audit::cli
