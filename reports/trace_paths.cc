#include "reports/trace_paths.h"

#include <fcntl.h>
#include <google/protobuf/stubs/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "proto/file_kind.h"
#include "proto/trace_io.h"
#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTraceExtension = ".fp8trace";
constexpr size_t kPrefixBytes = 64 << 10;  // hashed to tell files of one size apart
constexpr size_t kMaxCopyLines = 20;       // copies named one by one; the rest counted

bool HasTraceExtension(const fs::path& p) { return p.extension() == kTraceExtension; }

// "a, b, c, ..." of at most three names.
std::string FewNames(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i > 0 ? ", " : "") + names[i];
  if (names.size() > 3) out += ", ...";
  return Printable(out, 300);
}

// The traces under directory `arg`, to kMaxTraceDirDepth levels; links and too deep directories
// noted in `skipped`.
bool WalkDirectory(const std::string& arg, std::vector<std::string>* found,
                   std::vector<std::string>* skipped, std::string* error) {
  std::vector<std::string> links, deep;
  size_t dirs = 1;
  std::error_code ec;
  fs::recursive_directory_iterator it(arg, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code type_ec;
    const bool link = it->is_symlink(type_ec);
    if (link) {
      // Not followed: a trace, or a directory of them, elsewhere.
      if (HasTraceExtension(p) || fs::is_directory(p, type_ec)) {
        links.push_back(p.lexically_relative(arg).string());
      }
      continue;
    }
    if (it->is_directory(type_ec)) {
      if (it.depth() + 1 > kMaxTraceDirDepth) {  // DIR/a is level 1
        it.disable_recursion_pending();
        deep.push_back(p.lexically_relative(arg).string());
      } else if (++dirs > kMaxTraceDirs) {
        *error = arg + ": more than " + std::to_string(kMaxTraceDirs) +
                 " directories below it: name the directories that hold the traces";
        return false;
      }
      continue;
    }
    if (HasTraceExtension(p) && it->is_regular_file(type_ec)) found->push_back(p.string());
  }
  if (ec) {
    *error = arg + ": " + ec.message();
    return false;
  }
  if (!links.empty() && skipped != nullptr) {
    skipped->push_back(
        arg + ": skipped " + Plural(links.size(), "symbolic link", "symbolic links") + " (" +
        FewNames(links) + "): links in a directory are not followed; name a trace to read it");
  }
  if (!deep.empty() && skipped != nullptr) {
    skipped->push_back(arg + ": not read: subdirectories more than " +
                       std::to_string(kMaxTraceDirDepth) + " levels deep (" + FewNames(deep) +
                       "); name them to read their traces");
  }
  if (found->empty()) {
    *error = arg + ": no *" + std::string(kTraceExtension) + " files in this directory" +
             (links.empty() ? "" : " (only symbolic links, which are not followed)");
    return false;
  }
  std::sort(found->begin(), found->end());
  return true;
}

// A 64-bit FNV-1a hash of the first `max` bytes of `path`; false when it cannot be read.
bool HashBytes(const std::string& path, size_t max, uint64_t* hash) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  uint64_t h = 1469598103934665603ull;
  std::vector<unsigned char> buf(1 << 20);
  size_t done = 0;
  bool ok = true;
  while (done < max) {
    const ssize_t n = ::read(fd, buf.data(), std::min(buf.size(), max - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    for (ssize_t k = 0; k < n; ++k) h = (h ^ buf[static_cast<size_t>(k)]) * 1099511628211ull;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  *hash = h;
  return ok;
}

// Whether two files hold the same bytes (both of `size` bytes).
bool SameBytes(const std::string& a, const std::string& b) {
  const int fa = ::open(a.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  const int fb = ::open(b.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  bool same = fa >= 0 && fb >= 0;
  std::vector<char> x(1 << 20), y(1 << 20);
  while (same) {
    const ssize_t n = ::read(fa, x.data(), x.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      same = false;
      break;
    }
    ssize_t got = 0;
    while (got < n) {
      const ssize_t m = ::read(fb, y.data() + got, static_cast<size_t>(n - got));
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) break;
      got += m;
    }
    if (got != n || std::memcmp(x.data(), y.data(), static_cast<size_t>(n)) != 0) same = false;
    if (n == 0) break;
  }
  if (fa >= 0) ::close(fa);
  if (fb >= 0) ::close(fb);
  return same;
}

// A file named as a trace is read as one, whatever it holds: a damaged trace is reported as such.
bool NamedLikeATrace(const std::string& path) {
  constexpr std::string_view kSuffix = ".fp8trace";
  return path.size() >= kSuffix.size() &&
         path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

// Its first record is a trace header (README.md is not).
bool StartsWithAHeader(const std::string& path) {
  google::protobuf::LogSilencer quiet;
  std::string error;
  auto reader = TraceFileReader::Open(path, &error);
  v1::TraceRecord record;
  return reader != nullptr && reader->Next(&record) == TraceFileReader::Status::kRecord &&
         record.has_header();
}

}  // namespace

bool ExpandTracePaths(const std::vector<std::string>& paths, std::vector<std::string>* files,
                      std::string* error, std::vector<std::string>* skipped) {
  // Each file once: (device, inode) -> the name it was first given as.
  std::map<std::pair<uint64_t, uint64_t>, std::string> seen;
  auto add = [&](const std::string& path, const struct stat& st) {
    const auto [it, fresh] =
        seen.emplace(std::pair<uint64_t, uint64_t>{st.st_dev, st.st_ino}, path);
    if (!fresh) {
      *error = path + ": given twice (the same file as " + it->second + ")";
      return false;
    }
    files->push_back(path);
    return true;
  };
  for (const std::string& arg : paths) {
    struct stat st {};
    if (::stat(arg.c_str(), &st) != 0) {
      *error = arg + ": " +
               (errno == ENOENT ? std::string("no such file or directory")
                                : std::string(std::strerror(errno)));
      return false;
    }
    if (!S_ISDIR(st.st_mode)) {
      // Refused here, before anything opens it: a FIFO would wait for a writer.
      if (!S_ISREG(st.st_mode)) {
        *error = arg + ": not a regular file (" + FileKind(st.st_mode) + ")";
        return false;
      }
      if (!NamedLikeATrace(arg) && !StartsWithAHeader(arg)) {
        *error = arg +
                 ": not an fp8audit trace (it does not begin with a trace header; traces are "
                 "the *.fp8trace files fp8audit run writes)";
        return false;
      }
      if (!add(arg, st)) return false;
      continue;
    }
    std::vector<std::string> found;
    if (!WalkDirectory(arg, &found, skipped, error)) return false;
    for (const std::string& path : found) {
      // lstat: the file found, not what a link put in its place since would point to.
      struct stat one {};
      if (::lstat(path.c_str(), &one) != 0) {
        *error = path + ": " + std::strerror(errno);
        return false;
      }
      if (!S_ISREG(one.st_mode)) {
        *error = path + ": changed while the directory was read (now " +
                 (S_ISLNK(one.st_mode) ? std::string("a symbolic link") : FileKind(one.st_mode)) +
                 ")";
        return false;
      }
      if (!add(path, one)) return false;
    }
  }
  std::vector<std::string> notes;
  DropCopies(files, &notes);
  if (skipped != nullptr) skipped->insert(skipped->end(), notes.begin(), notes.end());
  return true;
}

void DropCopies(std::vector<std::string>* files, std::vector<std::string>* notes) {
  // Candidates: files whose size another file shares, then whose first bytes hash alike, then
  // whose whole bytes hash alike; a file is compared byte by byte with the first of its hash
  // only, so that time grows with the bytes read, never with the square of the files.
  std::map<int64_t, std::vector<size_t>> by_size;
  for (size_t i = 0; i < files->size(); ++i) {
    struct stat st {};
    if (::stat((*files)[i].c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      by_size[st.st_size].push_back(i);
    }
  }
  std::vector<bool> drop(files->size(), false);
  size_t dropped = 0;
  for (const auto& [size, group] : by_size) {
    if (group.size() < 2) continue;
    std::map<uint64_t, std::vector<size_t>> by_prefix;
    for (size_t i : group) {
      uint64_t hash = 0;
      if (HashBytes((*files)[i], kPrefixBytes, &hash)) by_prefix[hash].push_back(i);
    }
    for (const auto& [prefix, same_prefix] : by_prefix) {
      if (same_prefix.size() < 2) continue;
      std::map<uint64_t, size_t> first_of;  // whole-file hash -> the first file with it
      for (size_t i : same_prefix) {
        uint64_t hash = 0;
        if (!HashBytes((*files)[i], ~size_t{0}, &hash)) continue;
        const auto [it, fresh] = first_of.emplace(hash, i);
        if (fresh || !SameBytes((*files)[it->second], (*files)[i])) continue;
        drop[i] = true;
        if (++dropped <= kMaxCopyLines) {
          notes->push_back(Printable((*files)[i], 2048) + ": the same bytes as " +
                           Printable((*files)[it->second], 2048) + ": read once");
        }
      }
    }
  }
  if (dropped > kMaxCopyLines) {
    notes->push_back("... and " + std::to_string(dropped - kMaxCopyLines) +
                     " more copies of traces before them: read once");
  }
  std::vector<std::string> kept;
  for (size_t i = 0; i < files->size(); ++i) {
    if (!drop[i]) kept.push_back(std::move((*files)[i]));
  }
  *files = std::move(kept);
}

TraceDirSnapshot SnapshotTraceDir(const std::string& dir) {
  TraceDirSnapshot snapshot;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!HasTraceExtension(it->path())) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // no links
    const int64_t mtime_ns =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    snapshot[it->path().string()] = {mtime_ns, static_cast<int64_t>(st.st_size)};
  }
  return snapshot;
}

std::vector<std::string> TracesWrittenSince(const std::string& dir,
                                            const TraceDirSnapshot& before) {
  std::vector<std::string> written;
  for (const auto& [path, stamp] : SnapshotTraceDir(dir)) {
    auto it = before.find(path);
    if (it == before.end() || it->second != stamp) written.push_back(path);
  }
  return written;
}

std::vector<std::string> TracesOfRun(const std::vector<std::string>& traces,
                                     const std::string& run_id, std::vector<std::string>* others) {
  google::protobuf::LogSilencer quiet;
  std::vector<std::string> ours;
  for (const std::string& path : traces) {
    std::string error;
    auto reader = TraceFileReader::Open(path, &error);
    v1::TraceRecord record;
    if (reader != nullptr && reader->Next(&record) == TraceFileReader::Status::kRecord &&
        record.has_header() && !record.header().run_id().empty() &&
        record.header().run_id() != run_id) {
      others->push_back(path);
    } else {
      ours.push_back(path);
    }
  }
  return ours;
}

}  // namespace fp8audit::reports
