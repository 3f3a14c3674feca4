#include "cli/run_reports.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
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

// The directory entry a path names: its directory (links followed) and its last name, also where
// no file has that name yet. `ok` false where the directory cannot be read or the name is "." or
// "..".
struct Entry {
  bool ok = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;
};

Entry EntryOf(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  Entry e;
  e.name = slash == std::string::npos ? p : p.substr(slash + 1);
  struct stat st {};
  if (e.name.empty() || e.name == "." || e.name == ".." || ::stat(dir.c_str(), &st) != 0) return e;
  e.ok = true;
  e.dev = st.st_dev;
  e.ino = st.st_ino;
  return e;
}

// Whether writing `a` can replace `b` or what `b` reads: the same directory entry, or one existing
// file (a link to it, another hard link).
bool SameTarget(const std::string& a, const std::string& b) {
  const Entry x = EntryOf(a), y = EntryOf(b);
  if (x.ok && y.ok && x.dev == y.dev && x.ino == y.ino && x.name == y.name) return true;
  return a == b || reports::SameFile(a, b);
}

// Whether `path` is a trace in the folder `dir`: named *.fp8trace, directly in it (by any name of
// the folder).
bool TraceIn(const std::string& path, const std::string& dir) {
  constexpr std::string_view kSuffix = ".fp8trace";
  const Entry e = EntryOf(path);
  struct stat st {};
  return e.ok && e.name.size() > kSuffix.size() &&
         std::string_view(e.name).substr(e.name.size() - kSuffix.size()) == kSuffix &&
         ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == e.dev &&
         st.st_ino == e.ino;
}

}  // namespace

bool CheckReportFiles(const ReportFiles& files, const RunPaths& run, std::string* error) {
  const auto named = Each(files);
  for (size_t i = 0; i < named.size(); ++i) {
    if (named[i].path->empty()) continue;
    const std::string& path = *named[i].path;
    const std::string flag = std::string(named[i].flag) + " " + path;
    reports::OutputTarget target;
    std::string why;
    if (!reports::ClassifyOutput(path, &target, &why)) {
      *error = std::string(named[i].flag) + " " + why;
      return false;
    }
    // A file not there yet is made beside it: its directory must take one.
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    if (target == reports::OutputTarget::kReplace && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      *error = flag + ": cannot create a file in " + dir + " (" + std::strerror(errno) + ")";
      return false;
    }
    for (const auto& [input_flag, input] : run.inputs) {
      if (SameTarget(path, input)) {
        *error = flag + " is the " + input_flag + " file " + input +
                 ", which this run reads: name another file for the report";
        return false;
      }
    }
    if (!run.out.empty() && SameTarget(path, run.out)) {
      *error = flag + " is the --out folder " + run.out + ": name another file for the report";
      return false;
    }
    if (!run.out.empty() && TraceIn(path, run.out)) {
      *error = flag + " is a trace in --out " + run.out +
               ": name a file outside it or not named *.fp8trace";
      return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (!named[j].path->empty() && SameTarget(*named[j].path, path)) {
        *error = std::string(named[j].flag) + " " + *named[j].path + " and " + flag +
                 " name the same file";
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
