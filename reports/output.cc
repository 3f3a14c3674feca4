#include "reports/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace fp8audit::reports {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

// A temporary file beside `path` with the mode a plain create would give (0666 less the umask).
int CreateTemporary(const std::string& path, std::string* tmp, int* err) {
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  *tmp = name.data();
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) {
    *err = errno;
    ::close(fd);
    ::unlink(tmp->c_str());
    return -1;
  }
  return fd;
}

}  // namespace

bool WriteAll(int fd, std::string_view content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool ClassifyOutput(const std::string& path, OutputTarget* target, std::string* error) {
  struct stat st {};
  *target = OutputTarget::kReplace;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;  // created
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  if (S_ISLNK(st.st_mode) && ::stat(path.c_str(), &st) != 0) return true;  // dangling: replaced
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return true;
  if (S_ISDIR(st.st_mode)) {
    *error = path + ": is a directory";
    return false;
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    *target = OutputTarget::kInPlace;
    return true;
  }
  *error = path + ": not a file that can be written (" +
           (S_ISSOCK(st.st_mode) ? "a socket" : "a block device") + ")";
  return false;
}

std::string TemporaryBeside(const std::string& path, std::string* error) {
  std::string tmp;
  int err = 0;
  const int fd = CreateTemporary(path, &tmp, &err);
  if (fd < 0) {
    *error = path + ": " + std::strerror(err);
    return "";
  }
  ::close(fd);
  return tmp;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat x {
  }, y{};
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error) {
  auto out = FileOutput::Create(path, error);
  if (out == nullptr) return false;
  out->Write(content);
  return out->Finish(error);
}

std::unique_ptr<FileOutput> FileOutput::Create(const std::string& path, std::string* error) {
  OutputTarget target;
  if (!ClassifyOutput(path, &target, error)) return nullptr;
  if (target == OutputTarget::kInPlace) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      *error = path + ": " + std::strerror(errno);
      return nullptr;
    }
    return std::unique_ptr<FileOutput>(new FileOutput(fd, path, "", /*owned=*/true));
  }
  std::string tmp;
  int err = 0;
  const int fd = CreateTemporary(path, &tmp, &err);
  if (fd < 0) {
    *error = path + ": " + std::strerror(err);
    return nullptr;
  }
  return std::unique_ptr<FileOutput>(new FileOutput(fd, path, tmp, /*owned=*/true));
}

std::unique_ptr<FileOutput> FileOutput::ForFd(int fd, std::string name) {
  return std::unique_ptr<FileOutput>(new FileOutput(fd, std::move(name), "", /*owned=*/false));
}

FileOutput::FileOutput(int fd, std::string name, std::string tmp, bool owned)
    : fd_(fd), name_(std::move(name)), tmp_(std::move(tmp)), owned_(owned) {
  buffer_.reserve(kBufferBytes);
}

FileOutput::~FileOutput() {
  if (finished_ || !owned_) return;
  ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void FileOutput::Write(std::string_view text) {
  if (buffer_.size() + text.size() > kBufferBytes) {
    Flush();
    if (text.size() > kBufferBytes) {
      if (errno_ == 0 && !WriteAll(fd_, text)) errno_ = errno;
      return;
    }
  }
  buffer_.append(text);
}

void FileOutput::Flush() {
  if (errno_ == 0 && !WriteAll(fd_, buffer_)) errno_ = errno;
  buffer_.clear();
}

bool FileOutput::Finish(std::string* error) {
  if (finished_) return errno_ == 0;
  Flush();
  finished_ = true;
  if (owned_ && ::close(fd_) != 0 && errno_ == 0) errno_ = errno;
  if (!tmp_.empty()) {
    if (errno_ == 0 && ::rename(tmp_.c_str(), name_.c_str()) != 0) errno_ = errno;
    if (errno_ != 0) ::unlink(tmp_.c_str());
  }
  if (errno_ != 0) {
    *error = name_ + ": " + std::strerror(errno_);
    return false;
  }
  return true;
}

}  // namespace fp8audit::reports
