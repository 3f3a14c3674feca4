#include "agent/src/nvtx_parser.h"

#include <cstdint>
#include <optional>

#include "fp8audit/nvtx_grammar.h"
#include "fp8audit/vocabulary_proto.h"

namespace fp8audit::agent {
namespace {

namespace v1 = ::fp8audit::v1;

v1::EventKind KindOf(nvtx::Event e) {
  switch (e) {
    case nvtx::Event::kAutocastEnter:
      return v1::AUTOCAST_ENTER;
    case nvtx::Event::kAutocastExit:
      return v1::AUTOCAST_EXIT;
    case nvtx::Event::kCheckpointEnter:
      return v1::CHECKPOINT_ENTER;
    case nvtx::Event::kCheckpointExit:
      return v1::CHECKPOINT_EXIT;
    case nvtx::Event::kModuleForward:
      return v1::MODULE_FORWARD;
    case nvtx::Event::kModuleBackward:
      return v1::MODULE_BACKWARD;
    case nvtx::Event::kUpdateForward:
      return v1::UPDATE_FORWARD;
    case nvtx::Event::kUpdateBackward:
      return v1::UPDATE_BACKWARD;
    case nvtx::Event::kUpdate:
      return v1::UPDATE;
    case nvtx::Event::kStashPush:
      return v1::STASH_PUSH;
    case nvtx::Event::kStashPop:
      return v1::STASH_POP;
    case nvtx::Event::kException:
      return v1::EXCEPTION;
  }
  return v1::EVENT_KIND_UNSPECIFIED;
}

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
  const std::optional<nvtx::Event> found = nvtx::ParseEvent(head);
  if (!found) return false;
  event->set_kind(KindOf(*found));
  while (end != std::string_view::npos) {
    message.remove_prefix(end + 1);
    end = message.find(' ');
    const std::string_view token = message.substr(0, end);
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    uint64_t n = 0;
    if (key == nvtx::kKeyDepth && ParseU64(value, &n) && n <= UINT32_MAX) {
      event->set_autocast_depth(static_cast<uint32_t>(n));
    } else if (key == nvtx::kKeyFrame && ParseU64(value, &n)) {
      event->set_frame(n);
    } else if (key == nvtx::kKeyPhase && ParseU64(value, &n) && n <= UINT32_MAX) {
      event->set_checkpoint_phase(static_cast<uint32_t>(n));
    } else if (key == nvtx::kKeyKind) {
      if (const auto kind = ParseCheckpointKind(value)) event->set_checkpoint_kind(ToProto(*kind));
    } else if (key == nvtx::kKeyModule) {
      event->set_module(std::string(value));
    } else if (key == nvtx::kKeyFailed) {
      event->set_failed(value == "1" || value == "true");
    } else if (key == nvtx::kKeyCount && ParseU64(value, &n)) {
      event->set_count(n);
    } else if (key == nvtx::kKeyPass) {
      if (value == nvtx::kPassForward) event->set_pass(v1::FORWARD);
      if (value == nvtx::kPassBackward) event->set_pass(v1::BACKWARD);
    }
  }
  return true;
}

bool IsMicrobatchRange(std::string_view text, std::string_view range) {
  return !range.empty() && nvtx::IsMessage(text, range);
}

bool ParseMicrobatchId(std::string_view text, uint64_t* id) {
  size_t end = text.find(' ');
  while (end != std::string_view::npos) {
    text.remove_prefix(end + 1);
    end = text.find(' ');
    const std::string_view token = text.substr(0, end);
    const std::string_view key = nvtx::kKeyId;
    if (token.size() > key.size() && token.substr(0, key.size()) == key &&
        token[key.size()] == '=') {
      return ParseU64(token.substr(key.size() + 1), id);
    }
  }
  return false;
}

}  // namespace fp8audit::agent
