// Which trace files a command reads: the files and directories named (subdirectories too, to a
// bounded depth), each file once, and for `fp8audit run` the traces its own processes wrote.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fp8audit::reports {

// Subdirectories of a named directory are read this many levels deep (DIR/node0/... is 1).
inline constexpr int kMaxTraceDirDepth = 8;
// Directories visited under one named directory; past this the command refuses (one line).
inline constexpr size_t kMaxTraceDirs = 100000;

// The trace files that `paths` name: a file as given (a symbolic link to one too); a directory's
// *.fp8trace regular files, and its subdirectories' to kMaxTraceDirDepth levels (deeper ones are
// not read: one line in `skipped`). A symbolic link found in a directory (to a trace or to a
// directory) is not followed (a link planted there must not make the report read another file):
// `skipped` gets one line per directory that had any. A file with the same bytes as one before it
// (a copy) is read once: one line in `skipped` names both. Returns false and sets `error` (one
// line) for a missing path, a directory without traces, a file given twice (the same file by two
// names or through a directory), or more than kMaxTraceDirs directories.
bool ExpandTracePaths(const std::vector<std::string>& paths, std::vector<std::string>* files,
                      std::string* error, std::vector<std::string>* skipped = nullptr);

// Drops from `files` each file whose bytes equal an earlier one's, with one line in `notes` each
// ("COPY: the same bytes as FIRST: read once"; past 20, one line counts the rest). Reads only
// files whose size another file shares, each at most three times.
void DropCopies(std::vector<std::string>* files, std::vector<std::string>* notes);

// The *.fp8trace regular files of a directory (not symbolic links) with their modification time
// and size, to tell which traces a run wrote (created or changed) from those there before it.
using TraceDirSnapshot = std::map<std::string, std::pair<int64_t, int64_t>>;
TraceDirSnapshot SnapshotTraceDir(const std::string& dir);
std::vector<std::string> TracesWrittenSince(const std::string& dir, const TraceDirSnapshot& before);

// Of `traces`, those whose header names `run_id` (TraceHeader.run_id), and those of a recorder
// that records none (an older agent: kept, it cannot be told apart). The others (another run's)
// go to `others`. A file whose header cannot be read is kept: its audit says why.
std::vector<std::string> TracesOfRun(const std::vector<std::string>& traces,
                                     const std::string& run_id, std::vector<std::string>* others);

}  // namespace fp8audit::reports
