#include "fp8audit/patterns.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "proto/file_kind.h"

namespace fp8audit::agent {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view NextToken(std::string_view* rest) {
  *rest = Trim(*rest);
  size_t n = 0;
  while (n < rest->size() && !IsBlank((*rest)[n])) ++n;
  std::string_view token = rest->substr(0, n);
  rest->remove_prefix(n);
  return token;
}

std::string Printable(std::string_view s) {
  std::string out(s.substr(0, 40));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = '?';
  }
  return out + (s.size() > 40 ? "..." : "");
}

bool ParseEvent(std::string_view s, RuleEvent* out) {
  if (s == "update.forward") {
    *out = RuleEvent::kUpdateForward;
  } else if (s == "update.backward") {
    *out = RuleEvent::kUpdateBackward;
  } else if (s == "update") {
    *out = RuleEvent::kUpdate;
  } else if (s == "none") {
    *out = RuleEvent::kNone;
  } else {
    return false;
  }
  return true;
}

bool ParseMatch(std::string_view s, MatchKind* out) {
  if (s == "contains") {
    *out = MatchKind::kContains;
  } else if (s == "prefix") {
    *out = MatchKind::kPrefix;
  } else if (s == "regex") {
    *out = MatchKind::kRegex;
  } else {
    return false;
  }
  return true;
}

PatternRule Builtin(RuleEvent event, const char* regex, const char* what, int scaled_max_param,
                    bool chunked = false) {
  PatternRule r;
  r.chunked = chunked;
  r.event = event;
  r.match = MatchKind::kRegex;
  r.pattern = regex;
  r.origin = std::string("built-in (") + what + ")";
  r.scaled_max_param = scaled_max_param;
  std::string error;
  r.regex = CompileLimitedRegex(r.pattern, &error);
  return r;
}

}  // namespace

bool PatternRule::Matches(std::string_view name) const {
  if (name.size() > kMaxMatchedName) name = name.substr(0, kMaxMatchedName);
  if (match == MatchKind::kRegex && name.size() > kMaxRegexMatchedName) {
    name = name.substr(0, kMaxRegexMatchedName);
  }
  switch (match) {
    case MatchKind::kContains:
      return name.find(pattern) != std::string_view::npos;
    case MatchKind::kPrefix:
      return name.substr(0, pattern.size()) == pattern;
    case MatchKind::kRegex:
      return regex != nullptr && std::regex_match(name.begin(), name.end(), *regex);
  }
  return false;
}

std::shared_ptr<const std::regex> CompileLimitedRegex(std::string_view p, std::string* error) {
  if (p.empty()) {
    *error = "empty regex";
    return nullptr;
  }
  if (p.size() > kMaxRegexLength) {
    *error = "regex longer than " + std::to_string(kMaxRegexLength) + " characters";
    return nullptr;
  }
  // repeated[d]: group d (0 = top level) holds an unbounded repetition (* or +). Repeating such a
  // group again, (a*)* or (\w+::)+, is refused: it is what makes matching slow on long names.
  std::vector<bool> repeated(1, false);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) {
        *error = "regex ends with a backslash";
        return nullptr;
      }
      const char d = p[i + 1];
      if (!in_class && d >= '1' && d <= '9') {
        *error = "back-references are not supported";
        return nullptr;
      }
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      if (static_cast<int>(repeated.size()) > kMaxRegexNesting) {
        *error = "groups nested deeper than " + std::to_string(kMaxRegexNesting);
        return nullptr;
      }
      repeated.push_back(false);
    } else if (c == ')') {
      if (repeated.size() == 1) {
        *error = "unbalanced ')'";
        return nullptr;
      }
      const bool inner = repeated.back();
      repeated.pop_back();
      if (inner && i + 1 < p.size() && (p[i + 1] == '*' || p[i + 1] == '+')) {
        *error = "nested repetition like (a*)* is not supported";
        return nullptr;
      }
      if (inner) repeated.back() = true;
    } else if (c == '*' || c == '+') {
      repeated.back() = true;
    } else if (c == '{' || c == '}') {
      *error = "counted repetition {n,m} is not supported (write \\{ for a brace)";
      return nullptr;
    }
  }
  const int depth = static_cast<int>(repeated.size()) - 1;
  if (in_class || depth != 0) {
    *error = in_class ? "unterminated '['" : "unbalanced '('";
    return nullptr;
  }
  auto flags = std::regex_constants::ECMAScript;
#if defined(__GLIBCXX__)
  // Breadth-first (Thompson) matching: polynomial time on any name; needs no back-references.
  flags |= std::regex_constants::__polynomial;
#endif
  try {
    // Matched with regex_match over the whole name, in one pass: libstdc++'s regex_search would
    // restart at every position (quadratic in the name's length).
    return std::make_shared<const std::regex>("[\\s\\S]*(?:" + std::string(p) + ")[\\s\\S]*",
                                              flags);
  } catch (const std::regex_error& e) {
    *error = std::string("bad regex: ") + e.what();
  } catch (const std::exception& e) {
    *error = std::string("regex rejected: ") + e.what();
  }
  return nullptr;
}

bool ParsePatterns(std::string_view text, std::string_view source, std::vector<PatternRule>* rules,
                   std::string* error) {
  const std::string src(source);
  if (text.size() > kMaxPatternFileBytes) {
    *error = src + ": larger than " + std::to_string(kMaxPatternFileBytes) + " bytes";
    return false;
  }
  std::vector<PatternRule> parsed;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    const std::string where = src + ":" + std::to_string(line_no) + ": ";
    if (line.size() > kMaxPatternLine) {
      *error = where + "line longer than " + std::to_string(kMaxPatternLine) + " characters";
      return false;
    }
    if (line.find('\0') != std::string_view::npos) {
      *error = where + "contains a NUL byte";
      return false;
    }
    std::string_view rest = Trim(line);
    if (rest.empty() || rest.front() == '#') continue;
    PatternRule rule;
    const std::string_view event = NextToken(&rest);
    if (!ParseEvent(event, &rule.event)) {
      *error = where + "unknown event '" + Printable(event) +
               "' (expected update.forward, update.backward, update or none)";
      return false;
    }
    const std::string_view match = NextToken(&rest);
    if (match.empty()) {
      *error = where + "missing match kind and pattern (expected: <event> <match> <pattern>)";
      return false;
    }
    if (!ParseMatch(match, &rule.match)) {
      *error = where + "unknown match kind '" + Printable(match) +
               "' (expected contains, prefix or regex)";
      return false;
    }
    rest = Trim(rest);
    if (rest.empty()) {
      *error = where + "missing pattern";
      return false;
    }
    rule.pattern = std::string(rest);
    if (rule.match == MatchKind::kRegex) {
      std::string why;
      rule.regex = CompileLimitedRegex(rule.pattern, &why);
      if (rule.regex == nullptr) {
        *error = where + why;
        return false;
      }
    }
    if (parsed.size() >= kMaxPatternRules) {
      *error = where + "more than " + std::to_string(kMaxPatternRules) + " rules";
      return false;
    }
    rule.origin = src + ":" + std::to_string(line_no);
    parsed.push_back(std::move(rule));
  }
  rules->insert(rules->end(), std::make_move_iterator(parsed.begin()),
                std::make_move_iterator(parsed.end()));
  return true;
}

bool LoadPatternFile(const std::string& path, std::vector<PatternRule>* rules, std::string* error) {
  // Non-blocking, so that a FIFO (or a device) is refused at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *error = path + ": not a regular file (" + FileKind(st.st_mode) + ")";
    return false;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxPatternFileBytes) {
      ::close(fd);
      *error = path + ": larger than " + std::to_string(kMaxPatternFileBytes) + " bytes";
      return false;
    }
  }
  ::close(fd);
  return ParsePatterns(text, path, rules, error);
}

const std::vector<PatternRule>& BuiltinRules() {
  static const auto* rules = new std::vector<PatternRule>{
      // Transformer Engine, transformer_engine/common/recipe/delayed_scaling.cu:
      // kernel_bulk(float*, AmaxParams, size_t, AmaxComputeAlgo, float scaled_max) and
      // kernel(const float*, const float*, float*, float*, size_t, size_t, AmaxComputeAlgo,
      //        float scaled_max).
      Builtin(RuleEvent::kUpdate,
              R"(^(void )?transformer_engine::delayed_scaling_recipe::(.*::)?kernel_bulk(<.*>)?\()",
              "Transformer Engine DelayedScaling kernel_bulk", 4, /*chunked=*/true),
      Builtin(RuleEvent::kUpdate,
              R"(^(void )?transformer_engine::delayed_scaling_recipe::(.*::)?kernel(<.*>)?\()",
              "Transformer Engine DelayedScaling kernel", 7),
      // This project's kernels (kernels/delayed_scaling_update.cu): delayed_scaling_update_kernel(
      // float*, long, long, float*, float*, float max_value, int margin, AmaxAlgo), max_value being
      // the format's FP8 max; then any other fp8audit::kernels function named like an update.
      // (Demangled templates start with their return type, "void ".)
      Builtin(RuleEvent::kUpdate,
              R"(^(void )?fp8audit::kernels::[\w:]*(\(anonymous namespace\)::[\w:]*)?)"
              R"(delayed_scaling_update_kernel(<.*>)?\()",
              "fp8audit delayed_scaling_update_kernel", 5),
      Builtin(RuleEvent::kUpdate,
              R"(^(void )?fp8audit::kernels::[\w:]*(\(anonymous namespace\)::[\w:]*)?)"
              R"(\w*[Uu]pdate\w*[<(])",
              "fp8audit update kernels", -1),
  };
  return *rules;
}

Classifier::Classifier(std::vector<PatternRule> user_rules)
    : rules_(std::move(user_rules)), user_count_(rules_.size()) {
  const auto& builtins = BuiltinRules();
  rules_.insert(rules_.end(), builtins.begin(), builtins.end());
}

const PatternRule* Classifier::Match(std::string_view name) const {
  for (const PatternRule& rule : rules_) {
    if (rule.Matches(name)) return &rule;
  }
  return nullptr;
}

ScaledMax ClassifyScaledMax(float value) {
  if (!(value > 0.0f) || !std::isfinite(value)) return ScaledMax::kOther;
  for (int m = 0; m < 7; ++m) {
    if (value == std::ldexp(57344.0f, -m)) return ScaledMax::kE5M2;
  }
  for (int m = 0; m <= 32; ++m) {
    if (value == std::ldexp(448.0f, -m)) return ScaledMax::kE4M3;
  }
  return ScaledMax::kOther;
}

std::string Demangle(const char* symbol) {
  if (symbol == nullptr) return {};
  int status = 0;
  char* out = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) {
    std::free(out);
    return symbol;
  }
  std::string name(out);
  std::free(out);
  return name;
}

bool ParameterIsFloat(std::string_view name, int index) {
  if (index < 0) return false;
  const size_t close = name.rfind(')');
  if (close == std::string_view::npos) return false;
  size_t open = std::string_view::npos;
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string_view::npos) return false;
  const std::string_view params = name.substr(open + 1, close - open - 1);
  int param = 0;
  int nest = 0;
  size_t start = 0;
  for (size_t i = 0; i <= params.size(); ++i) {
    const char c = i < params.size() ? params[i] : ',';
    if (c == '(' || c == '<' || c == '[') ++nest;
    if (c == ')' || c == '>' || c == ']') --nest;
    if (c == ',' && nest == 0) {
      if (param == index) return Trim(params.substr(start, i - start)) == "float";
      ++param;
      start = i + 1;
    }
  }
  return false;
}

}  // namespace fp8audit::agent
