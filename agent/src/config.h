// The agent's configuration, read once from the environment (every variable optional).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8audit/nvtx_grammar.h"
#include "fp8audit/vocabulary.h"

namespace fp8audit::agent {

// How kernel_bulk's scaled_max maps to a direction: FP8AUDIT_FP8_FORMAT.
enum class FormatHint : uint8_t { kAuto, kHybrid, kE4M3 };

// What a thread does when its event buffer is full: FP8AUDIT_ON_FULL.
enum class OnFull : uint8_t {
  kWait,  // wait for the writer to make room (bounded; see rings.h), then drop
  kDrop,  // drop the event at once (counted)
};

// Which probes count state updates: FP8AUDIT_PROBE, a --probe value of fp8audit/vocabulary.h
// (probe_control.h has the rules).
using ::fp8audit::ProbeMode;

struct Config {
  bool disabled = false;                                  // FP8AUDIT_DISABLE=1
  std::string out_dir;                                    // FP8AUDIT_OUT, made absolute
  uint32_t expect_forward = 1;                            // FP8AUDIT_EXPECT_FORWARD
  uint32_t expect_backward = 1;                           // FP8AUDIT_EXPECT_BACKWARD
  bool expect_forward_given = false;                      // FP8AUDIT_EXPECT_FORWARD was set
  bool expect_backward_given = false;                     // FP8AUDIT_EXPECT_BACKWARD was set
  bool fail_fast = false;                                 // FP8AUDIT_FAIL_FAST=1
  std::string patterns_path;                              // FP8AUDIT_PATTERNS
  std::string microbatch_range = nvtx::kMicrobatchRange;  // FP8AUDIT_MICROBATCH_RANGE
  std::string step_mark = nvtx::kStepMark;                // FP8AUDIT_STEP_MARK
  bool markers_configured = false;                        // FP8AUDIT_MICROBATCH_RANGE was set
  FormatHint format = FormatHint::kAuto;                  // FP8AUDIT_FP8_FORMAT=auto|hybrid|e4m3
  OnFull on_full = OnFull::kWait;                         // FP8AUDIT_ON_FULL=wait|drop
  bool self_profile = false;                              // FP8AUDIT_SELF_PROFILE=1
  ProbeMode probe = ProbeMode::kAuto;                     // FP8AUDIT_PROBE (ParseProbeMode)
  bool python_hook = false;  // FP8AUDIT_PYHOOK names te-count (the Python hook counts updates)
  bool python_hook_armed = false;  // FP8AUDIT_PYHOOK names te-version (it marks TE's import)
  int32_t rank = -1;               // RANK, else LOCAL_RANK, else SLURM_PROCID
  std::string run_id;              // FP8AUDIT_RUN_ID: [A-Za-z0-9._-], at most kMaxRunId bytes
  bool redact = true;              // FP8AUDIT_REDACT=off: command-line secrets kept
  std::vector<std::string> redact_words;  // FP8AUDIT_REDACT="w,w": more secret words (redact.h)
};

inline constexpr uint32_t kMaxExpectation = 1000000;
inline constexpr size_t kMaxMarkerName = 200;
inline constexpr size_t kMaxRunId = 64;

using EnvLookup = std::function<const char*(const char*)>;

// Reads the configuration. Each bad value adds one warning line (without a trailing newline) and
// falls back to its default. `cwd` resolves a relative FP8AUDIT_OUT.
Config ReadConfig(const EnvLookup& env, const std::string& cwd, std::vector<std::string>* warnings);

}  // namespace fp8audit::agent
