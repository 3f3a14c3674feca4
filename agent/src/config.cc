#include "agent/src/config.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "fp8audit/redact.h"

namespace fp8audit::agent {
namespace {

bool ParseUint(const char* text, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text == '\0' || std::strlen(text) > 12) return false;
  uint64_t v = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

// "1", "true", "yes", "on" → true; "0", "false", "no", "off", "" → false; else nullopt.
int ParseBool(const char* text) {
  static const char* const kTrue[] = {"1", "true", "yes", "on"};
  static const char* const kFalse[] = {"0", "false", "no", "off", ""};
  for (const char* t : kTrue) {
    if (std::strcmp(text, t) == 0) return 1;
  }
  for (const char* f : kFalse) {
    if (std::strcmp(text, f) == 0) return 0;
  }
  return -1;
}

std::string Quoted(const char* value) {
  std::string s(value, strnlen(value, 80));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return "'" + s + (std::strlen(value) > 80 ? "...'" : "'");
}

}  // namespace

Config ReadConfig(const EnvLookup& env, const std::string& cwd,
                  std::vector<std::string>* warnings) {
  Config c;
  auto warn = [&](const char* name, const char* value, const std::string& why,
                  const std::string& fallback) {
    warnings->push_back(std::string(name) + "=" + Quoted(value) + " " + why + "; using " +
                        fallback);
  };
  auto flag = [&](const char* name, bool* out) {
    const char* v = env(name);
    if (v == nullptr) return;
    const int b = ParseBool(v);
    if (b < 0) {
      warn(name, v, "is not 0 or 1", *out ? "1" : "0");
    } else {
      *out = b == 1;
    }
  };

  flag("FP8AUDIT_DISABLE", &c.disabled);
  if (c.disabled) return c;
  flag("FP8AUDIT_FAIL_FAST", &c.fail_fast);
  flag("FP8AUDIT_SELF_PROFILE", &c.self_profile);

  struct ExpectVariable {
    const char* name;
    uint32_t* value;
    bool* given;
  };
  for (auto [name, out, given] :
       {ExpectVariable{"FP8AUDIT_EXPECT_FORWARD", &c.expect_forward, &c.expect_forward_given},
        ExpectVariable{"FP8AUDIT_EXPECT_BACKWARD", &c.expect_backward, &c.expect_backward_given}}) {
    const char* v = env(name);
    if (v == nullptr) continue;
    uint64_t n = 0;
    if (ParseUint(v, kMaxExpectation, &n)) {
      *out = static_cast<uint32_t>(n);
      *given = true;
    } else {
      warn(name, v, "is not a whole number in 0.." + std::to_string(kMaxExpectation), "1");
    }
  }

  std::string out = "fp8audit-traces";
  if (const char* v = env("FP8AUDIT_OUT"); v != nullptr) {
    if (*v == '\0') {
      warn("FP8AUDIT_OUT", v, "is empty", out);
    } else {
      out = v;
    }
  }
  c.out_dir = (out[0] == '/' || cwd.empty()) ? out : cwd + "/" + out;

  if (const char* v = env("FP8AUDIT_PATTERNS"); v != nullptr) {
    if (*v == '\0') {
      warn("FP8AUDIT_PATTERNS", v, "is empty", "the built-in patterns only");
    } else {
      c.patterns_path = (v[0] == '/' || cwd.empty()) ? std::string(v) : cwd + "/" + v;
    }
  }

  for (auto [name, out_name, configured] :
       {std::tuple{"FP8AUDIT_MICROBATCH_RANGE", &c.microbatch_range, &c.markers_configured},
        std::tuple{"FP8AUDIT_STEP_MARK", &c.step_mark, static_cast<bool*>(nullptr)}}) {
    const char* v = env(name);
    if (v == nullptr) continue;
    const size_t n = std::strlen(v);
    if (n == 0 || n > kMaxMarkerName) {
      warn(name, v, "must be 1.." + std::to_string(kMaxMarkerName) + " characters",
           "'" + *out_name + "'");
      continue;
    }
    *out_name = v;
    if (configured != nullptr) *configured = true;
  }

  if (const char* v = env("FP8AUDIT_FP8_FORMAT"); v != nullptr) {
    if (std::strcmp(v, "auto") == 0 || *v == '\0') {
      c.format = FormatHint::kAuto;
    } else if (std::strcmp(v, "hybrid") == 0) {
      c.format = FormatHint::kHybrid;
    } else if (std::strcmp(v, "e4m3") == 0) {
      c.format = FormatHint::kE4M3;
    } else {
      warn("FP8AUDIT_FP8_FORMAT", v, "is not auto, hybrid or e4m3", "auto");
    }
  }

  if (const char* v = env("FP8AUDIT_ON_FULL"); v != nullptr) {
    if (std::strcmp(v, "wait") == 0 || *v == '\0') {
      c.on_full = OnFull::kWait;
    } else if (std::strcmp(v, "drop") == 0) {
      c.on_full = OnFull::kDrop;
    } else {
      warn("FP8AUDIT_ON_FULL", v, "is not wait or drop", "wait");
    }
  }

  if (const char* v = env("FP8AUDIT_PROBE"); v != nullptr) {
    if (const auto mode = ParseProbeMode(v)) {
      c.probe = *mode;
    } else {
      warn("FP8AUDIT_PROBE", v, "is not one of " + std::string(kProbeModeNames),
           std::string(ProbeModeName(ProbeMode::kAuto)));
    }
  }

  if (const char* v = env("FP8AUDIT_PYHOOK"); v != nullptr) {
    std::string features = ",";
    for (const char* p = v; *p != '\0' && features.size() < 4096; ++p) {
      if (*p != ' ' && *p != '\t') features += *p;
    }
    features += ",";
    c.python_hook = features.find(",te-count,") != std::string::npos;
    c.python_hook_armed = features.find(",te-version,") != std::string::npos;
  }

  bool redact_off = false;
  c.redact_words = RedactWords(env("FP8AUDIT_REDACT"), &redact_off);
  c.redact = !redact_off;

  if (const char* v = env("FP8AUDIT_RUN_ID"); v != nullptr) {
    const std::string id = v;
    const bool ok =
        !id.empty() && id.size() <= kMaxRunId && std::all_of(id.begin(), id.end(), [](char ch) {
          return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        });
    if (ok) {
      c.run_id = id;
    } else {
      warn("FP8AUDIT_RUN_ID", v,
           "is not 1-" + std::to_string(kMaxRunId) + " letters, digits, '.', '_' or '-'", "none");
    }
  }

  for (const char* name : {"RANK", "LOCAL_RANK", "SLURM_PROCID"}) {
    const char* v = env(name);
    if (v == nullptr) continue;
    uint64_t n = 0;
    if (ParseUint(v, 0x7fffffff, &n)) {
      c.rank = static_cast<int32_t>(n);
    } else {
      warn(name, v, "is not a rank", "no rank");
    }
    break;
  }
  return c;
}

}  // namespace fp8audit::agent
