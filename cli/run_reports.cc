#include "cli/run_reports.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "reports/output.h"
#include "reports/render.h"

namespace fp8audit::cli {
namespace {

struct Named {
  const char* flag;
  const std::string* path;
  reports::Format format;
};

std::array<Named, 4> Each(const ReportFiles& files) {
  return {{{"--junit", &files.junit, reports::Format::kJunit},
           {"--html", &files.html, reports::Format::kHtml},
           {"--json", &files.json, reports::Format::kJson},
           {"--markdown", &files.markdown, reports::Format::kMarkdown}}};
}

}  // namespace

bool CheckReportFiles(const ReportFiles& files, std::string* error) {
  const auto named = Each(files);
  for (size_t i = 0; i < named.size(); ++i) {
    if (named[i].path->empty()) continue;
    reports::OutputTarget target;
    std::string why;
    if (!reports::ClassifyOutput(*named[i].path, &target, &why)) {
      *error = std::string(named[i].flag) + " " + why;
      return false;
    }
    // A file not there yet is made beside it: its directory must take one.
    const std::string& path = *named[i].path;
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    if (target == reports::OutputTarget::kReplace && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      *error = std::string(named[i].flag) + " " + path + ": cannot create a file in " + dir + " (" +
               std::strerror(errno) + ")";
      return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (*named[j].path == *named[i].path) {
        *error = std::string(named[j].flag) + " and " + named[i].flag + " name the same file " +
                 *named[i].path;
        return false;
      }
    }
  }
  return true;
}

bool WriteReportFiles(const v1::AuditReport& report, const ReportFiles& files,
                      std::vector<std::string>* errors) {
  bool ok = true;
  reports::RenderOptions render;
  render.max_rows = 0;  // a file holds every row
  for (const Named& n : Each(files)) {
    if (n.path->empty()) continue;
    std::string text, error;
    if (!reports::Render(report, n.format, render, &text, &error) ||
        !reports::WriteFileAtomically(*n.path, text, &error)) {
      errors->push_back(std::string(n.flag) + ": cannot write " + error);
      ok = false;
    }
  }
  return ok;
}

std::vector<std::string> Fp8auditFlagsAfterCommand(const std::vector<std::string>& command) {
  // Flags no common tool shares (--out, --json, --quiet are everybody's: not listed).
  static constexpr std::array<std::string_view, 12> kOwn = {
      "--fix-te",    "--fail-fast", "--self-profile",   "--no-python-hook",
      "--on-full",   "--max-rows",  "--expect-forward", "--expect-backward",
      "--semantics", "--probe",     "--junit",          "--patterns"};
  std::vector<std::string> found;
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string_view arg = command[i];
    const std::string_view name = arg.substr(0, arg.find('='));
    for (std::string_view own : kOwn) {
      if (name == own) {
        found.emplace_back(arg);
        break;
      }
    }
  }
  return found;
}

}  // namespace fp8audit::cli
