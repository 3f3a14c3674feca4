// Kernel-name patterns: which kernel launches are FP8 state updates. The agent's public header
// (library fp8audit_agent_patterns): its classifier, and `fp8audit run --patterns`, which checks a
// pattern file with this parser before the job starts.
//
// Pattern file: UTF-8/ASCII text, at most kMaxPatternFileBytes, one rule per line:
//   <event> <match> <pattern>
//   event   update.forward | update.backward | update (direction from the launch) | none
//   match   contains | prefix | regex (ECMAScript, found anywhere in the name; anchor with ^ and $;
//           only the first kMaxRegexMatchedName characters are searched)
//   pattern the rest of the line, trailing blanks removed; matched against the demangled name
//           with its parameter list (the mangled name when it does not demangle)
// Blank lines and lines starting with '#' are ignored. Rules are tried in file order, before the
// built-in rules; the first match decides (`none` excludes a kernel a later rule would match).
// Regex limits (bounded time and memory on any input): at most kMaxRegexLength characters, groups
// nested at most kMaxRegexNesting deep, no counted repetition {n,m}, no back-references, and no
// repeated group that itself repeats, like (a*)* or (\w+::)+.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace fp8audit::agent {

enum class RuleEvent : uint8_t { kNone, kUpdateForward, kUpdateBackward, kUpdate };
enum class MatchKind : uint8_t { kContains, kPrefix, kRegex };

inline constexpr size_t kMaxPatternFileBytes = 64 * 1024;
inline constexpr size_t kMaxPatternRules = 256;
inline constexpr size_t kMaxPatternLine = 1024;
inline constexpr size_t kMaxRegexLength = 256;
inline constexpr int kMaxRegexNesting = 8;
inline constexpr size_t kMaxMatchedName = 8192;       // longer names are matched on their prefix
inline constexpr size_t kMaxRegexMatchedName = 2048;  // the same, for regex rules

struct PatternRule {
  RuleEvent event = RuleEvent::kNone;
  MatchKind match = MatchKind::kContains;
  std::string pattern;
  std::string origin;         // "FILE:LINE" or "built-in"
  int scaled_max_param = -1;  // index of a float `scaled_max` parameter (built-in TE rules)
  bool chunked = false;       // built-in TE kernel_bulk: full-chunk launches continue one update
  std::shared_ptr<const std::regex> regex;

  bool Matches(std::string_view name) const;
};

// Parses pattern-file text; `source` names it in errors. On failure returns false, leaves `rules`
// untouched and sets `error` to one line "SOURCE:LINE: what" (or "SOURCE: what").
bool ParsePatterns(std::string_view text, std::string_view source, std::vector<PatternRule>* rules,
                   std::string* error);
// Reads and parses a pattern file (rejects files over kMaxPatternFileBytes).
bool LoadPatternFile(const std::string& path, std::vector<PatternRule>* rules, std::string* error);

// Built-in rules: Transformer Engine's DelayedScaling update kernels and this project's.
const std::vector<PatternRule>& BuiltinRules();

// Checks a regex against the limits above and compiles it. Returns null and sets `error`.
std::shared_ptr<const std::regex> CompileLimitedRegex(std::string_view pattern, std::string* error);

class Classifier {
 public:
  explicit Classifier(std::vector<PatternRule> user_rules = {});
  // The first matching rule (user rules, then built-ins), or null.
  const PatternRule* Match(std::string_view name) const;
  size_t user_rules() const { return user_count_; }

 private:
  std::vector<PatternRule> rules_;
  size_t user_count_ = 0;
};

// What a float `scaled_max` argument says: FP8 max of E4M3 (448) or E5M2 (57344) over 2^margin.
enum class ScaledMax : uint8_t { kNotRead, kE4M3, kE5M2, kOther };
// E5M2 for 57344 / 2^m with 0 <= m < 7, E4M3 for 448 / 2^m with 0 <= m <= 32 (57344 / 2^7 == 448
// reads as E4M3 with no margin), else kOther.
ScaledMax ClassifyScaledMax(float value);

// Demangles a C++ symbol (returns it unchanged when it does not demangle).
std::string Demangle(const char* symbol);
// True when the demangled `name` has a parameter list whose parameter `index` is exactly `float`.
bool ParameterIsFloat(std::string_view name, int index);

}  // namespace fp8audit::agent
