// What `fp8audit run` writes besides its printed report: report files in other formats
// (--junit, --html, --json, --markdown FILE), checked before the command runs, and the flags of
// fp8audit's own that were placed after CMD (they went to CMD).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fp8audit/report.pb.h"

namespace fp8audit::cli {

struct ReportFiles {
  std::string junit, html, json, markdown;
  bool empty() const { return junit.empty() && html.empty() && json.empty() && markdown.empty(); }
};

// What the run reads and writes besides its report files, which a report file must not replace.
struct RunPaths {
  std::vector<std::pair<std::string, std::string>> inputs;  // a flag and its file ("--patterns")
  std::string out;                                          // --out: the folder of the traces
};

// False and `error` (one line, "--html PATH: reason") when a named file cannot be written, when two
// flags name the same file, or when one names an input of the run, the --out folder or a trace in
// it (*.fp8trace there: an earlier run's, or one this run writes). The same file: the same name in
// the same directory (also for a file not there yet, or named through a link to its directory), or
// one existing file by two names. Checked before CMD runs and before --out is made, so a mistake
// costs no job and leaves nothing behind.
bool CheckReportFiles(const ReportFiles& files, const RunPaths& run, std::string* error);

// Renders the report in each named format and writes it (atomically); one line per file that
// could not be written. True when every file was written.
bool WriteReportFiles(const v1::AuditReport& report, const ReportFiles& files,
                      std::vector<std::string>* errors);

// The arguments after CMD's name that are flags only fp8audit run takes (--fix-te, --probe=te,
// ...), in order: CMD received them, fp8audit did not.
std::vector<std::string> Fp8auditFlagsAfterCommand(const std::vector<std::string>& command);

}  // namespace fp8audit::cli
