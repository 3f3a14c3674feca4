// Scenarios: loading Protobuf text format with file:line:column errors, and compiling a
// v1::Scenario into the runner's program (module names resolved to dense ids).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8audit/scenario.pb.h"
#include "state/semantics.h"

namespace fp8audit::state {

namespace v1 = ::fp8audit::v1;

enum class OpKind : uint8_t {
  kCall,
  kAutocast,
  kCheckpoint,
  kGradMode,
  kFail,
  kTry,
  kBackward,
  kRepeat
};

struct Op {
  OpKind kind = OpKind::kCall;
  uint32_t module = 0;                                      // kCall
  bool enabled = true;                                      // kAutocast (fp8 enabled), kGradMode
  bool delayed = true;                                      // kAutocast: recipe is DelayedScaling
  CheckpointKind checkpoint = CheckpointKind::kReentrant;   // kCheckpoint
  v1::Fail::Where fail_where = v1::Fail::ORIGINAL_FORWARD;  // kFail
  std::vector<uint32_t> microbatches;                       // kFail: empty = all
  uint32_t count = 1;                                       // kRepeat
  std::vector<Op> body;
};

struct ModuleSpec {
  std::string name;
  ModuleKind kind = ModuleKind::kLinear;
  bool eval = false;
  bool frozen = false;
};

struct CompiledScenario {
  std::string name;
  std::vector<ModuleSpec> modules;
  std::vector<Op> program;
  bool backward_inside_autocast = false;
  bool has_backward_op = false;
  bool input_requires_grad = true;
  uint32_t microbatches = 1;
  uint32_t microbatches_per_step = 0;                    // 0: one step for all
  std::vector<std::pair<uint32_t, bool>> after_forward;  // module, eval
  uint32_t expect_forward = 1;
  uint32_t expect_backward = 1;
  // Problems that make parts of the scenario impossible; reported as model violations.
  std::vector<std::string> impossible;
};

// Parses `text` (from `path`, for messages). On error returns nullopt and sets `error` to one
// line "PATH:LINE:COLUMN: problem".
std::optional<v1::Scenario> ParseScenarioText(const std::string& text, const std::string& path,
                                              std::string* error);
std::optional<v1::Scenario> LoadScenarioFile(const std::string& path, std::string* error);

// Resolves names and checks references. Errors (an undeclared module, a duplicate name) return
// nullopt with one line in `error`, prefixed with `path:line:column` when `locations` is known.
std::optional<CompiledScenario> CompileScenario(const v1::Scenario& scenario, std::string* error,
                                                const std::string& path = "<scenario>");

// Parse + compile, with source positions in errors.
std::optional<CompiledScenario> LoadAndCompileScenario(const std::string& path, std::string* error);

}  // namespace fp8audit::state
