#include "state/scenario.h"

#include <fcntl.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <unordered_map>

#include "fp8audit/vocabulary_proto.h"

namespace fp8audit::state {

namespace {

namespace pb = google::protobuf;
using Tree = pb::TextFormat::ParseInfoTree;

std::string TooDeep() { return "ops nested more than " + std::to_string(kMaxOpNesting) + " deep"; }

// Message nesting the parser allows: a scenario holds ops, an op its payload, whose body holds
// ops: kMaxOpNesting ops deep is 2 * kMaxOpNesting messages, and an autocast's recipe one more.
constexpr int kParserRecursionLimit = 2 * kMaxOpNesting + 1;

// Keeps the first error only: one line is what the user sees.
class FirstError : public pb::io::ErrorCollector {
 public:
  explicit FirstError(std::string path) : path_(std::move(path)) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!error_.empty()) return;
    // Only ops nest deeper than the parser's recursion limit: say so in the scenario's terms.
    const bool too_deep = message.find("recursion limit") != std::string::npos;
    error_ = path_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " +
             (too_deep ? TooDeep() : message);
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::string error_;
};

class Compiler {
 public:
  Compiler(const v1::Scenario& scenario, std::string path, const Tree* tree)
      : scenario_(scenario), path_(std::move(path)), root_(tree) {}

  std::optional<CompiledScenario> Compile(std::string* error);

 private:
  std::string Where(const Tree* tree, const pb::FieldDescriptor* fd, int index) const {
    if (!tree) return path_;
    const auto loc = tree->GetLocation(fd, fd->is_repeated() ? index : -1);
    if (loc.line < 0) return path_;
    return path_ + ":" + std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1);
  }
  std::string Where(const Tree* tree, const pb::Message& parent, const char* field,
                    int index) const {
    return Where(tree, parent.GetDescriptor()->FindFieldByName(field), index);
  }
  static const Tree* Nested(const Tree* tree, const pb::FieldDescriptor* fd, int index) {
    if (!tree) return nullptr;
    return tree->GetTreeForNested(fd, fd->is_repeated() ? index : -1);
  }
  static const Tree* Nested(const Tree* tree, const pb::Message& parent, const char* field,
                            int index) {
    return Nested(tree, parent.GetDescriptor()->FindFieldByName(field), index);
  }

  bool CheckEnums(const pb::Message& message, const Tree* tree);
  // Compiles ops nested `depth` deep (the program: 1) inside `checkpoint_depth` checkpoints, and
  // adds the ops they execute per microbatch (an upper bound) to `*cost`.
  bool CompileOps(const pb::RepeatedPtrField<v1::Op>& ops, const pb::Message& parent,
                  const char* field, const Tree* tree, int depth, int checkpoint_depth,
                  std::vector<Op>* out, uint64_t* cost);

  const v1::Scenario& scenario_;
  std::string path_;
  const Tree* root_;
  std::unordered_map<std::string, uint32_t> ids_;
  int node_depth_ = 0;         // schedule nodes around the ops being compiled
  uint32_t backward_ops_ = 0;  // backward ops compiled so far
  CompiledScenario result_;
  std::string error_;
};

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}
uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  return b != 0 && a > std::numeric_limits<uint64_t>::max() / b
             ? std::numeric_limits<uint64_t>::max()
             : a * b;
}

std::string OpLimit() {
  return "the limit of " + std::to_string(kMaxExpandedOps) +
         " ops executed (repeats and recomputes included)";
}

// Checks the enum fields of `message` and of the messages it holds, except the ops of its bodies
// (CompileOps checks each of those).
bool Compiler::CheckEnums(const pb::Message& message, const Tree* tree) {
  const pb::Reflection* reflection = message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const pb::FieldDescriptor* fd : fields) {
    const int n = fd->is_repeated() ? reflection->FieldSize(message, fd) : 1;
    if (fd->type() == pb::FieldDescriptor::TYPE_ENUM) {
      for (int i = 0; i < n; ++i) {
        const int value = fd->is_repeated() ? reflection->GetRepeatedEnumValue(message, fd, i)
                                            : reflection->GetEnumValue(message, fd);
        const pb::EnumDescriptor* type = fd->enum_type();
        if (type->FindValueByNumber(value)) continue;
        std::string known;
        for (int v = 0; v < type->value_count(); ++v) {
          known += (v ? ", " : "") + type->value(v)->name();
        }
        error_ = Where(tree, fd, i) + ": " + fd->name() + ": " + std::to_string(value) +
                 " is not a known value of " + type->name() + " (" + known + ")";
        return false;
      }
    } else if (fd->type() == pb::FieldDescriptor::TYPE_MESSAGE &&
               fd->message_type() != v1::Op::descriptor()) {
      for (int i = 0; i < n; ++i) {
        const pb::Message& sub = fd->is_repeated() ? reflection->GetRepeatedMessage(message, fd, i)
                                                   : reflection->GetMessage(message, fd);
        if (!CheckEnums(sub, Nested(tree, fd, i))) return false;
      }
    }
  }
  return true;
}

std::optional<CompiledScenario> Compiler::Compile(std::string* error) {
  result_.name = scenario_.name();
  if (scenario_.schema_version() > 1) {
    *error = Where(root_, scenario_, "schema_version", -1) + ": schema_version " +
             std::to_string(scenario_.schema_version()) + " is newer than this fp8audit (1)";
    return std::nullopt;
  }
  if (!CheckEnums(scenario_, root_)) {
    *error = error_;
    return std::nullopt;
  }
  for (int i = 0; i < scenario_.modules_size(); ++i) {
    const v1::ModuleDecl& m = scenario_.modules(i);
    if (m.name().empty()) {
      *error = Where(root_, scenario_, "modules", i) + ": module without a name";
      return std::nullopt;
    }
    if (m.name().size() > kMaxNameBytes) {
      *error = Where(root_, scenario_, "modules", i) + ": module name longer than " +
               std::to_string(kMaxNameBytes) + " bytes";
      return std::nullopt;
    }
    if (!ids_.emplace(m.name(), static_cast<uint32_t>(result_.modules.size())).second) {
      *error =
          Where(root_, scenario_, "modules", i) + ": module '" + m.name() + "' is declared twice";
      return std::nullopt;
    }
    ModuleSpec spec;
    spec.name = m.name();
    switch (m.kind()) {
      case v1::LAYERNORM_LINEAR:
        spec.kind = ModuleKind::kLayerNormLinear;
        break;
      case v1::LAYERNORM_MLP:
        spec.kind = ModuleKind::kLayerNormMlp;
        break;
      case v1::LAYERNORM_MLP_CHECKPOINT:
        spec.kind = ModuleKind::kLayerNormMlpCheckpoint;
        break;
      case v1::GROUPED_LINEAR:
        spec.kind = ModuleKind::kGroupedLinear;
        break;
      case v1::OPS_FUSER:
        spec.kind = ModuleKind::kOpsFuser;
        break;
      default:  // LINEAR; unknown numbers were refused by CheckEnums
        spec.kind = ModuleKind::kLinear;
        break;
    }
    spec.eval = m.eval();
    spec.frozen = m.frozen();
    result_.modules.push_back(std::move(spec));
  }
  uint64_t program_cost = 0;
  if (!CompileOps(scenario_.program(), scenario_, "program", root_, 1, 0, &result_.program,
                  &program_cost)) {
    *error = error_;
    return std::nullopt;
  }
  // Each microbatch also resets every declared module's mode.
  result_.ops_per_microbatch = SaturatingAdd(program_cost, 1 + result_.modules.size());
  for (int i = 0; i < scenario_.after_forward_size(); ++i) {
    const auto& sm = scenario_.after_forward(i);
    auto it = ids_.find(sm.module());
    if (it == ids_.end()) {
      *error = Where(root_, scenario_, "after_forward", i) + ": module '" + sm.module() +
               "' is not declared";
      return std::nullopt;
    }
    result_.after_forward.emplace_back(it->second, sm.eval());
  }
  result_.backward_inside_autocast = scenario_.backward() == v1::INSIDE_AUTOCAST;
  result_.input_requires_grad = !scenario_.input_no_grad();
  result_.microbatches = scenario_.microbatches() ? scenario_.microbatches() : 1;
  result_.microbatches_per_step = scenario_.microbatches_per_step();
  if (!CheckLimits(result_, result_.microbatches, error,
                   Where(root_, scenario_, "microbatches", -1))) {
    return std::nullopt;
  }
  const bool delayed = scenario_.recipe().kind() != v1::CURRENT_SCALING;
  result_.expect_forward =
      scenario_.has_expect_forward() ? scenario_.expect_forward() : (delayed ? 1 : 0);
  result_.expect_backward =
      scenario_.has_expect_backward() ? scenario_.expect_backward() : (delayed ? 1 : 0);
  return std::move(result_);
}

bool Compiler::CompileOps(const pb::RepeatedPtrField<v1::Op>& ops, const pb::Message& parent,
                          const char* field, const Tree* tree, int depth, int checkpoint_depth,
                          std::vector<Op>* out, uint64_t* cost) {
  const bool default_delayed = scenario_.recipe().kind() != v1::CURRENT_SCALING;
  // Executions of each op here per microbatch: the forward and one recompute per checkpoint.
  const uint64_t runs = 1 + static_cast<uint64_t>(checkpoint_depth);
  out->reserve(ops.size());
  for (int i = 0; i < ops.size(); ++i) {
    const v1::Op& in = ops.Get(i);
    const Tree* t = Nested(tree, parent, field, i);
    const std::string where = Where(tree, parent, field, i);
    if (depth > kMaxOpNesting) {
      error_ = where + ": " + TooDeep();
      return false;
    }
    if (!CheckEnums(in, t)) return false;
    Op op;
    uint64_t body = 0;  // the ops its body executes per execution of the op
    switch (in.op_case()) {
      case v1::Op::kCall: {
        auto it = ids_.find(in.call().module());
        if (it == ids_.end()) {
          error_ = where + ": module '" + in.call().module() + "' is not declared";
          return false;
        }
        op.kind = OpKind::kCall;
        op.module = it->second;
        break;
      }
      case v1::Op::kAutocast: {
        op.kind = OpKind::kAutocast;
        op.enabled = !in.autocast().disabled();
        op.delayed = in.autocast().has_recipe()
                         ? in.autocast().recipe().kind() != v1::CURRENT_SCALING
                         : default_delayed;
        if (!CompileOps(in.autocast().body(), in.autocast(), "body", Nested(t, in, "autocast", -1),
                        depth + 1, checkpoint_depth, &op.body, &body)) {
          return false;
        }
        break;
      }
      case v1::Op::kCheckpoint:
        op.kind = OpKind::kCheckpoint;
        op.checkpoint = FromProto(in.checkpoint().kind());
        if (in.checkpoint().torch() && op.checkpoint != CheckpointKind::kReentrant) {
          error_ = where +
                   ": torch: true needs kind REENTRANT (torch.utils.checkpoint with "
                   "use_reentrant=False runs in the outer autograd task: spell it "
                   "kind: NON_REENTRANT without torch)";
          return false;
        }
        op.own_autograd_task = in.checkpoint().torch();
        if (!CompileOps(in.checkpoint().body(), in.checkpoint(), "body",
                        Nested(t, in, "checkpoint", -1), depth + 1, checkpoint_depth + 1, &op.body,
                        &body)) {
          return false;
        }
        break;
      case v1::Op::kGradMode:
        op.kind = OpKind::kGradMode;
        op.enabled = in.grad_mode().enabled();
        if (!CompileOps(in.grad_mode().body(), in.grad_mode(), "body",
                        Nested(t, in, "grad_mode", -1), depth + 1, checkpoint_depth, &op.body,
                        &body)) {
          return false;
        }
        break;
      case v1::Op::kFail:
        op.kind = OpKind::kFail;
        op.fail_where = in.fail().where();
        op.microbatches.assign(in.fail().microbatches().begin(), in.fail().microbatches().end());
        std::sort(op.microbatches.begin(), op.microbatches.end());
        op.microbatches.erase(std::unique(op.microbatches.begin(), op.microbatches.end()),
                              op.microbatches.end());
        if (op.fail_where != v1::Fail::ORIGINAL_FORWARD && checkpoint_depth == 0) {
          result_.impossible.push_back(where +
                                       ": a recompute failure outside any checkpoint never fires");
        }
        break;
      case v1::Op::kTry:
        op.kind = OpKind::kTry;
        if (!CompileOps(in.try_().body(), in.try_(), "body", Nested(t, in, "try", -1), depth + 1,
                        checkpoint_depth, &op.body, &body)) {
          return false;
        }
        break;
      case v1::Op::kBackward:
        op.kind = OpKind::kBackward;
        result_.has_backward_op = true;
        ++backward_ops_;
        if (node_depth_ > 0) {
          error_ = where +
                   ": backward inside a schedule_node (the schedule runs each node's "
                   "backward; put backward after the nodes)";
          return false;
        }
        if (checkpoint_depth > 0) {
          result_.impossible.push_back(
              where + ": backward inside a checkpointed callable cannot happen; ignored");
          continue;
        }
        break;
      case v1::Op::kRepeat:
        op.kind = OpKind::kRepeat;
        op.count = in.repeat().count();
        if (!CompileOps(in.repeat().body(), in.repeat(), "body", Nested(t, in, "repeat", -1),
                        depth + 1, checkpoint_depth, &op.body, &body)) {
          return false;
        }
        body = SaturatingMul(op.count, SaturatingAdd(runs, body));  // each iteration, then its body
        break;
      case v1::Op::kBackwardScope: {
        op.kind = OpKind::kBackwardScope;
        if (checkpoint_depth > 0 || node_depth_ > 0) {
          error_ = where + ": backward_scope inside a " +
                   (checkpoint_depth > 0 ? "checkpointed callable" : "schedule_node") +
                   " (the scope goes around a microbatch's backward calls)";
          return false;
        }
        const uint32_t backward_before = backward_ops_;
        if (!CompileOps(in.backward_scope().body(), in.backward_scope(), "body",
                        Nested(t, in, "backward_scope", -1), depth + 1, checkpoint_depth, &op.body,
                        &body)) {
          return false;
        }
        if (backward_ops_ == backward_before) {
          error_ = where +
                   ": backward_scope holds no backward op (the microbatch's backward "
                   "would run outside it: put `backward {}` in its body)";
          return false;
        }
        break;
      }
      case v1::Op::kScheduleNode:
        op.kind = OpKind::kScheduleNode;
        if (checkpoint_depth > 0 || node_depth_ > 0) {
          error_ = where + ": schedule_node inside a " +
                   (checkpoint_depth > 0 ? "checkpointed callable" : "schedule_node") +
                   " (nodes are pieces of the microbatch's own program)";
          return false;
        }
        ++node_depth_;
        if (!CompileOps(in.schedule_node().body(), in.schedule_node(), "body",
                        Nested(t, in, "schedule_node", -1), depth + 1, checkpoint_depth, &op.body,
                        &body)) {
          return false;
        }
        --node_depth_;
        break;
      case v1::Op::OP_NOT_SET:
        error_ = where +
                 ": empty op (expected call, autocast, checkpoint, grad_mode, fail, try, "
                 "backward, repeat, backward_scope or schedule_node)";
        return false;
    }
    const uint64_t op_cost = SaturatingAdd(runs, body);
    if (op_cost > kMaxExpandedOps) {
      error_ = where + ": this op alone exceeds " + OpLimit();
      return false;
    }
    *cost = SaturatingAdd(*cost, op_cost);
    out->push_back(std::move(op));
  }
  return true;
}

// Reads a regular file of at most kMaxScenarioBytes into `text`; returns the problem, or "".
std::string ReadRegularFile(int fd, std::string* text) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "cannot read the scenario file";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const std::string too_large = "larger than " + std::to_string(kMaxScenarioBytes >> 20) +
                                " MiB, the limit for a scenario file";
  if (static_cast<uint64_t>(st.st_size) > kMaxScenarioBytes) return too_large;
  // The file may have grown since fstat: read one byte past the limit at most.
  text->resize(static_cast<size_t>(st.st_size) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text->size()) {
      if (got > kMaxScenarioBytes) return too_large;
      text->resize(std::min(2 * got, kMaxScenarioBytes + 1));
    }
    const ssize_t n = read(fd, text->data() + got, text->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return "cannot read the scenario file";
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text->resize(got);
  return "";
}

bool ReadScenarioFile(const std::string& path, std::string* text, std::string* error) {
  // Non-blocking, so that opening a FIFO does not wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = path + ": cannot open the scenario file";
    return false;
  }
  const std::string problem = ReadRegularFile(fd, text);
  close(fd);
  if (problem.empty()) return true;
  *error = path + ": " + problem;
  return false;
}

}  // namespace

std::optional<v1::Scenario> ParseScenarioText(const std::string& text, const std::string& path,
                                              std::string* error) {
  pb::TextFormat::Parser parser;
  parser.SetRecursionLimit(kParserRecursionLimit);
  FirstError errors(path);
  parser.RecordErrorsTo(&errors);
  v1::Scenario scenario;
  if (!parser.ParseFromString(text, &scenario)) {
    *error = errors.error().empty() ? path + ": not a valid scenario" : errors.error();
    return std::nullopt;
  }
  return scenario;
}

std::optional<v1::Scenario> LoadScenarioFile(const std::string& path, std::string* error) {
  std::string text;
  if (!ReadScenarioFile(path, &text, error)) return std::nullopt;
  return ParseScenarioText(text, path, error);
}

uint64_t ExpandedOps(const CompiledScenario& scenario, uint32_t microbatches) {
  return SaturatingMul(scenario.ops_per_microbatch, microbatches);
}

bool CheckLimits(const CompiledScenario& scenario, uint32_t microbatches, std::string* error,
                 const std::string& where) {
  if (ExpandedOps(scenario, microbatches) <= kMaxExpandedOps) return true;
  *error = where + ": " + std::to_string(microbatches) + " microbatches of up to " +
           std::to_string(scenario.ops_per_microbatch) + " ops each exceed " + OpLimit();
  return false;
}

std::optional<CompiledScenario> CompileScenario(const v1::Scenario& scenario, std::string* error,
                                                const std::string& path) {
  return Compiler(scenario, path, nullptr).Compile(error);
}

std::optional<CompiledScenario> CompileScenarioText(const std::string& text,
                                                    const std::string& path, std::string* error) {
  pb::TextFormat::Parser parser;
  parser.SetRecursionLimit(kParserRecursionLimit);
  FirstError errors(path);
  parser.RecordErrorsTo(&errors);
  Tree tree;
  parser.WriteLocationsTo(&tree);
  v1::Scenario scenario;
  if (!parser.ParseFromString(text, &scenario)) {
    *error = errors.error().empty() ? path + ": not a valid scenario" : errors.error();
    return std::nullopt;
  }
  return Compiler(scenario, path, &tree).Compile(error);
}

std::optional<CompiledScenario> LoadAndCompileScenario(const std::string& path,
                                                       std::string* error) {
  std::string text;
  if (!ReadScenarioFile(path, &text, error)) return std::nullopt;
  return CompileScenarioText(text, path, error);
}

}  // namespace fp8audit::state
