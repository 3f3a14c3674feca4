// Writing a rendered report to a file.
#pragma once

#include <string>

namespace fp8audit::reports {

// Writes `content` to `path` atomically: a temporary file in the same directory, then rename, so
// readers see the old file or the whole new one. Returns false and sets `error` ("PATH: reason").
bool WriteFileAtomically(const std::string& path, const std::string& content, std::string* error);

// Writes `content` to a file descriptor (all of it, retrying short writes). False on error.
bool WriteAll(int fd, const std::string& content);

}  // namespace fp8audit::reports
