// --progress / --no-progress, and auditing traces with the progress they ask for on stderr.
// Parsing and wiring only; the progress itself is reports/progress.h.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reports/progress.h"
#include "reports/trace_set.h"

namespace fp8audit::cli {

struct ProgressFlags {
  bool on = false;
  CLI::Option* option = nullptr;

  void Add(CLI::App* sub) {
    option = sub->add_flag("--progress,!--no-progress", on,
                           "show (or never show) progress while reading traces on standard "
                           "error: bytes and traces read, rate, time left. Default: on a "
                           "terminal only");
  }
  // Unset unless a flag was given (the last one wins).
  std::optional<bool> Value() const {
    return option != nullptr && option->count() > 0 ? std::optional<bool>(on) : std::nullopt;
  }
};

// AuditTraceFiles with the progress `flags` ask for, labelled "fp8audit COMMAND".
inline reports::TraceSetResult AuditWithProgress(const std::string& command,
                                                 const std::vector<std::string>& files,
                                                 const ProgressFlags& flags,
                                                 reports::TraceSetOptions options) {
  const reports::ProgressMode mode = reports::ProgressModeForStderr(flags.Value());
  if (mode == reports::ProgressMode::kOff) return reports::AuditTraceFiles(files, options);
  reports::ReadProgress progress("fp8audit " + command, reports::FileSizes(files), mode);
  options.on_progress = [&](size_t file, uint64_t bytes, bool done) {
    progress.Update(file, bytes, done);
  };
  reports::TraceSetResult result = reports::AuditTraceFiles(files, options);
  progress.Finish();
  return result;
}

}  // namespace fp8audit::cli
