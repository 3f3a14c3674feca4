#include "agent/src/warn.h"

#include <errno.h>
#include <unistd.h>

namespace fp8audit::agent {
namespace {

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

void Warn(const std::string& text) {
  std::string line = "fp8audit: " + text;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  line += '\n';
  WriteAll(STDERR_FILENO, line.data(), line.size());
}

void WarnOnce(std::atomic<bool>* once, const std::string& text) {
  if (!once->exchange(true)) Warn(text);
}

}  // namespace fp8audit::agent
