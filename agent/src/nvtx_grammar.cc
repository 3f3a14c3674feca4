#include "agent/src/nvtx_grammar.h"

#include <cstdint>

#include "fp8audit/vocabulary_proto.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

struct Name {
  std::string_view text;
  v1::EventKind kind;
};

constexpr Name kEvents[] = {
    {"autocast.enter", v1::AUTOCAST_ENTER},
    {"autocast.exit", v1::AUTOCAST_EXIT},
    {"checkpoint.enter", v1::CHECKPOINT_ENTER},
    {"checkpoint.exit", v1::CHECKPOINT_EXIT},
    {"module.forward", v1::MODULE_FORWARD},
    {"module.backward", v1::MODULE_BACKWARD},
    {"update.forward", v1::UPDATE_FORWARD},
    {"update.backward", v1::UPDATE_BACKWARD},
    {"update", v1::UPDATE},
    {"stash.push", v1::STASH_PUSH},
    {"stash.pop", v1::STASH_POP},
    {"exception", v1::EXCEPTION},
};

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

}  // namespace

bool ParseStructuredMessage(std::string_view message, v1::Event* event) {
  size_t end = message.find(' ');
  const std::string_view head = message.substr(0, end);
  const Name* found = nullptr;
  for (const Name& n : kEvents) {
    if (n.text == head) found = &n;
  }
  if (found == nullptr) return false;
  event->set_kind(found->kind);
  while (end != std::string_view::npos) {
    message.remove_prefix(end + 1);
    end = message.find(' ');
    const std::string_view token = message.substr(0, end);
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    uint64_t n = 0;
    if (key == "depth" && ParseU64(value, &n) && n <= UINT32_MAX) {
      event->set_autocast_depth(static_cast<uint32_t>(n));
    } else if (key == "frame" && ParseU64(value, &n)) {
      event->set_frame(n);
    } else if (key == "phase" && ParseU64(value, &n) && n <= UINT32_MAX) {
      event->set_checkpoint_phase(static_cast<uint32_t>(n));
    } else if (key == "kind") {
      if (const auto kind = ParseCheckpointKind(value)) event->set_checkpoint_kind(ToProto(*kind));
    } else if (key == "module") {
      event->set_module(std::string(value));
    } else if (key == "failed") {
      event->set_failed(value == "1" || value == "true");
    } else if (key == "count" && ParseU64(value, &n)) {
      event->set_count(n);
    } else if (key == "pass") {
      if (value == "forward") event->set_pass(v1::FORWARD);
      if (value == "backward") event->set_pass(v1::BACKWARD);
    }
  }
  return true;
}

bool IsMicrobatchRange(std::string_view text, std::string_view range) {
  if (range.empty() || text.substr(0, range.size()) != range) return false;
  return text.size() == range.size() || text[range.size()] == ' ';
}

bool ParseMicrobatchId(std::string_view text, uint64_t* id) {
  size_t end = text.find(' ');
  while (end != std::string_view::npos) {
    text.remove_prefix(end + 1);
    end = text.find(' ');
    const std::string_view token = text.substr(0, end);
    if (token.substr(0, 3) == "id=") return ParseU64(token.substr(3), id);
  }
  return false;
}

}  // namespace fp8audit::agent
