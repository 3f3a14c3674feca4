// Scenarios: loading Protobuf text format with file:line:column errors, and compiling a
// v1::Scenario into the runner's program (module names resolved to dense ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8audit/scenario.pb.h"
#include "state/semantics.h"

namespace fp8audit::state {

namespace v1 = ::fp8audit::v1;

// Limits that keep a hostile or mistaken scenario from exhausting the machine; each exceeded one
// is an error naming it.
inline constexpr size_t kMaxScenarioBytes = size_t{4} << 20;  // a scenario file (4 MiB)
inline constexpr int kMaxOpNesting = 64;                      // ops inside ops
inline constexpr size_t kMaxNameBytes = 256;                  // a module's name
// Ops executed over a whole run: every op (a repeat's iterations included) counted once per
// execution, and an op inside k checkpoints executed up to 1 + k times (forward and recomputes);
// each microbatch counts one more, plus one per declared module (whose mode it resets).
inline constexpr uint64_t kMaxExpandedOps = 1'000'000;

enum class OpKind : uint8_t {
  kCall,
  kAutocast,
  kCheckpoint,
  kGradMode,
  kFail,
  kTry,
  kBackward,
  kRepeat,
  kBackwardScope,  // te.quantization_backward_scope() around the body (TE PR #3456)
  kScheduleNode    // a Megatron ScheduleNode: its graph is its own backward() call
};

struct Op {
  OpKind kind = OpKind::kCall;
  uint32_t module = 0;                                     // kCall
  bool enabled = true;                                     // kAutocast (fp8 enabled), kGradMode
  bool delayed = true;                                     // kAutocast: recipe is DelayedScaling
  CheckpointKind checkpoint = CheckpointKind::kReentrant;  // kCheckpoint
  // kCheckpoint, reentrant: torch.utils.checkpoint(use_reentrant=True) rather than TE's own
  // (`torch: true` in a scenario file): its nested backward is an autograd task of its own
  // (backward_update_per_autograd_task); only that is modelled (its recompute runs as TE's).
  bool own_autograd_task = false;
  v1::Fail::Where fail_where = v1::Fail::ORIGINAL_FORWARD;  // kFail
  std::vector<uint32_t> microbatches;                       // kFail: sorted, unique; empty = all
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
  // Upper bound of ops executed per microbatch (see kMaxExpandedOps), saturating at UINT64_MAX.
  uint64_t ops_per_microbatch = 1;
  // Problems that make parts of the scenario impossible; reported as model violations.
  std::vector<std::string> impossible;
};

// Ops executed over `microbatches` microbatches (saturating).
uint64_t ExpandedOps(const CompiledScenario& scenario, uint32_t microbatches);
// False, with one line "WHERE: problem" in `error`, when the run would exceed kMaxExpandedOps.
bool CheckLimits(const CompiledScenario& scenario, uint32_t microbatches, std::string* error,
                 const std::string& where = "<scenario>");

// Parses `text` (from `path`, for messages). On error returns nullopt and sets `error` to one
// line "PATH:LINE:COLUMN: problem". Ops nested more than kMaxOpNesting deep are an error.
std::optional<v1::Scenario> ParseScenarioText(const std::string& text, const std::string& path,
                                              std::string* error);
// Reads and parses a regular file of at most kMaxScenarioBytes (anything else is refused before
// it is read: a device, a FIFO, a directory).
std::optional<v1::Scenario> LoadScenarioFile(const std::string& path, std::string* error);

// Resolves names and checks references, enum values (proto3 enums take any number), nesting and
// the scenario's own microbatches against the limits. Errors (an undeclared module, a duplicate
// name, `kind: 99`) return nullopt with one line in `error`, prefixed with `path:line:column`
// when the source positions are known.
std::optional<CompiledScenario> CompileScenario(const v1::Scenario& scenario, std::string* error,
                                                const std::string& path = "<scenario>");

// Parse + compile, with source positions in errors.
std::optional<CompiledScenario> CompileScenarioText(const std::string& text,
                                                    const std::string& path, std::string* error);
std::optional<CompiledScenario> LoadAndCompileScenario(const std::string& path, std::string* error);

}  // namespace fp8audit::state
