#include "proto/text_escape.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace fp8audit {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s` (Unicode Table 3-7), 0 if none.
size_t SequenceLength(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto in = [](uint8_t v, uint8_t lo, uint8_t hi) { return v >= lo && v <= hi; };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (in(c, 0xC2, 0xDF)) return s.size() >= 2 && in(b(1), 0x80, 0xBF) ? 2 : 0;
  if (in(c, 0xE0, 0xEF)) {
    if (s.size() < 3) return 0;
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80;
    const uint8_t hi = c == 0xED ? 0x9F : 0xBF;
    return in(b(1), lo, hi) && in(b(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(c, 0xF0, 0xF4)) {
    if (s.size() < 4) return 0;
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = c == 0xF4 ? 0x8F : 0xBF;
    return in(b(1), lo, hi) && in(b(2), 0x80, 0xBF) && in(b(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

uint64_t Bit(int field) { return uint64_t{1} << field; }

// The string fields of each record that may hold recorded text, by field number. Plain constant
// arrays: nothing to destroy at exit while a writer thread may still use them.
template <typename Message>
struct Field {
  int number;
  std::string* (*get)(Message*);
};

using H = v1::TraceHeader;
constexpr Field<v1::Event> kEventFields[] = {
    {v1::Event::kDetailFieldNumber, [](v1::Event* e) { return e->mutable_detail(); }},
    {v1::Event::kModuleFieldNumber, [](v1::Event* e) { return e->mutable_module(); }},
};
constexpr Field<H> kHeaderFields[] = {
    {H::kHostFieldNumber, [](H* h) { return h->mutable_host(); }},
    {H::kAgentVersionFieldNumber, [](H* h) { return h->mutable_agent_version(); }},
    {H::kGpuFieldNumber, [](H* h) { return h->mutable_gpu(); }},
    {H::kDriverFieldNumber, [](H* h) { return h->mutable_driver(); }},
    {H::kCudaFieldNumber, [](H* h) { return h->mutable_cuda(); }},
    {H::kMarkersFieldNumber, [](H* h) { return h->mutable_markers(); }},
    {H::kCuptiFieldNumber, [](H* h) { return h->mutable_cupti(); }},
};

template <typename Message, size_t N>
bool EscapeFields(const Field<Message> (&fields)[N], Message* m, uint64_t* marks) {
  bool any = false;
  for (const Field<Message>& f : fields) {
    std::string* s = f.get(m);
    if (IsValidUtf8(*s)) continue;
    *s = EscapeBytes(*s);
    *marks |= Bit(f.number);
    any = true;
  }
  return any;
}

// Restores the marked fields; returns the marks of those that could not be (left as they were).
template <typename Message, size_t N>
uint64_t RestoreFields(const Field<Message> (&fields)[N], Message* m, uint64_t marks) {
  uint64_t failed = 0;
  for (const Field<Message>& f : fields) {
    if ((marks & Bit(f.number)) == 0) continue;
    std::string* s = f.get(m);
    std::string bytes;
    if (UnescapeBytes(*s, &bytes)) {
      *s = std::move(bytes);
    } else {
      failed |= Bit(f.number);
    }
  }
  return failed;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  while (!s.empty()) {
    const size_t n = SequenceLength(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

std::string EscapeBytes(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 8);
  while (!s.empty()) {
    const size_t n = SequenceLength(s);
    if (n == 0) {
      const auto c = static_cast<uint8_t>(s[0]);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
      s.remove_prefix(1);
    } else if (s[0] == '\\') {
      out += "\\\\";
      s.remove_prefix(1);
    } else {
      out.append(s.data(), n);
      s.remove_prefix(n);
    }
  }
  return out;
}

bool UnescapeBytes(std::string_view s, std::string* out) {
  out->clear();
  out->reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '\\') {
      out->push_back('\\');
      ++i;
      continue;
    }
    if (i + 3 < s.size() && s[i + 1] == 'x' && HexValue(s[i + 2]) >= 0 && HexValue(s[i + 3]) >= 0) {
      out->push_back(static_cast<char>(HexValue(s[i + 2]) * 16 + HexValue(s[i + 3])));
      i += 3;
      continue;
    }
    return false;
  }
  return true;
}

bool EscapeNonUtf8Fields(v1::Event* event) {
  uint64_t marks = event->escaped_fields();
  const bool any = EscapeFields(kEventFields, event, &marks);
  event->set_escaped_fields(marks);
  return any;
}

bool EscapeNonUtf8Fields(v1::TraceHeader* header) {
  uint64_t marks = header->escaped_fields();
  bool any = EscapeFields(kHeaderFields, header, &marks);
  bool command = false;
  for (const std::string& arg : header->command()) command = command || !IsValidUtf8(arg);
  if (command) {
    for (std::string& arg : *header->mutable_command()) arg = EscapeBytes(arg);
    marks |= Bit(v1::TraceHeader::kCommandFieldNumber);
    any = true;
  }
  header->set_escaped_fields(marks);
  return any;
}

bool RestoreEscapedFields(v1::Event* event) {
  const uint64_t failed = RestoreFields(kEventFields, event, event->escaped_fields());
  event->set_escaped_fields(failed);
  return failed == 0;
}

bool RestoreEscapedFields(v1::TraceHeader* header) {
  const uint64_t marks = header->escaped_fields();
  uint64_t failed = RestoreFields(kHeaderFields, header, marks);
  const uint64_t command = Bit(v1::TraceHeader::kCommandFieldNumber);
  if ((marks & command) != 0) {
    std::vector<std::string> args;
    for (const std::string& arg : header->command()) {
      if (!UnescapeBytes(arg, &args.emplace_back())) failed |= command;
    }
    if ((failed & command) == 0) {
      for (int i = 0; i < header->command_size(); ++i) {
        *header->mutable_command(i) = std::move(args[static_cast<size_t>(i)]);
      }
    }
  }
  header->set_escaped_fields(failed);
  return failed == 0;
}

}  // namespace fp8audit
