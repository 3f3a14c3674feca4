// Secrets in a recorded command line (the trace header's command, which every report prints):
// the value of a flag or a KEY=VALUE argument whose name looks like a secret's is replaced by
// kRedacted before anything is written. Header-only, the standard library alone.
//
// A name is the argument's text before '=' without its leading dashes (`--hf-token=x`,
// `HF_TOKEN=x`), or a flag `--name` / `-name` whose value is the next argument (`--token x`; not
// when that argument is itself a flag). It looks like a secret's when one of its words (split at
// '-', '_' and '.', any case) is one of kSecretWords or of the extra words the user gives
// (FP8AUDIT_REDACT="word,word"; FP8AUDIT_REDACT=off turns redaction off). Redacting too much is
// the safe side: `--max-key-len 5` loses its 5.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace fp8audit {

inline constexpr char kRedacted[] = "<redacted>";
inline constexpr const char* kSecretWords[] = {
    "token", "secret",     "password",    "passwd", "pwd",       "key",    "apikey",
    "auth",  "credential", "credentials", "cookie", "signature", "private"};

namespace redact_detail {

inline std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A name of letters, digits, '-', '_' and '.', starting with a letter or '_'.
inline bool IsName(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

inline bool LooksSecret(std::string_view name, const std::vector<std::string>& extra) {
  const std::string lower = Lower(name);
  size_t start = 0;
  while (start <= lower.size()) {
    size_t end = lower.find_first_of("-_.", start);
    if (end == std::string::npos) end = lower.size();
    const std::string_view word(lower.data() + start, end - start);
    if (!word.empty()) {
      for (const char* w : kSecretWords) {
        if (word == w) return true;
      }
      for (const std::string& w : extra) {
        if (!w.empty() && word == Lower(w)) return true;
      }
    }
    start = end + 1;
  }
  return false;
}

}  // namespace redact_detail

// The extra words of FP8AUDIT_REDACT ("a,b"); `off` set when it says off (or none, 0, false).
inline std::vector<std::string> RedactWords(const char* setting, bool* off) {
  *off = false;
  std::vector<std::string> words;
  if (setting == nullptr) return words;
  const std::string s = redact_detail::Lower(setting);
  if (s == "off" || s == "none" || s == "0" || s == "false") {
    *off = true;
    return words;
  }
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string w = s.substr(start, end - start);
    w.erase(std::remove_if(w.begin(), w.end(), [](unsigned char c) { return std::isspace(c); }),
            w.end());
    if (!w.empty()) words.push_back(w);
    start = end + 1;
  }
  return words;
}

// Replaces the secrets of `args` (argv[0] is the program and is kept); returns how many.
inline size_t RedactCommand(std::vector<std::string>* args, const std::vector<std::string>& extra) {
  using redact_detail::IsName;
  using redact_detail::LooksSecret;
  size_t redacted = 0;
  for (size_t i = 1; i < args->size(); ++i) {
    std::string& arg = (*args)[i];
    const size_t dashes = std::min(arg.find_first_not_of('-'), arg.size());
    const std::string_view body = std::string_view(arg).substr(dashes);
    const size_t eq = body.find('=');
    if (eq != std::string_view::npos) {
      const std::string_view name = body.substr(0, eq);
      if (IsName(name) && LooksSecret(name, extra) && body.size() > eq + 1) {
        arg = arg.substr(0, dashes + eq + 1) + kRedacted;
        ++redacted;
      }
      continue;
    }
    if (dashes == 0 || !IsName(body) || !LooksSecret(body, extra) || i + 1 >= args->size()) {
      continue;
    }
    std::string& value = (*args)[i + 1];
    if (!value.empty() && value[0] == '-') continue;  // the next flag, not this one's value
    value = kRedacted;
    ++redacted;
    ++i;
  }
  return redacted;
}

}  // namespace fp8audit
