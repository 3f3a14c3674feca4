// The agent's one stderr line: what every unit says when it cannot do its work, or steps aside.
#pragma once

#include <atomic>
#include <string>

namespace fp8audit::agent {

// One line on stderr ("fp8audit: " + text, line breaks as spaces). Writes with write(2) only.
void Warn(const std::string& text);
// Warn, at most once per `once` flag.
void WarnOnce(std::atomic<bool>* once, const std::string& text);

}  // namespace fp8audit::agent
