#include "state/scenario.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

namespace fp8audit::state {

namespace {

namespace pb = google::protobuf;
using Tree = pb::TextFormat::ParseInfoTree;

// Keeps the first error only: one line is what the user sees.
class FirstError : public pb::io::ErrorCollector {
 public:
  explicit FirstError(std::string path) : path_(std::move(path)) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!error_.empty()) return;
    error_ =
        path_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
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
  std::string Where(const Tree* tree, const pb::Message& parent, const char* field,
                    int index) const {
    if (!tree) return path_;
    const pb::FieldDescriptor* fd = parent.GetDescriptor()->FindFieldByName(field);
    const auto loc = tree->GetLocation(fd, fd->is_repeated() ? index : -1);
    if (loc.line < 0) return path_;
    return path_ + ":" + std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1);
  }
  static const Tree* Nested(const Tree* tree, const pb::Message& parent, const char* field,
                            int index) {
    if (!tree) return nullptr;
    const pb::FieldDescriptor* fd = parent.GetDescriptor()->FindFieldByName(field);
    return tree->GetTreeForNested(fd, fd->is_repeated() ? index : -1);
  }

  bool CompileOps(const pb::RepeatedPtrField<v1::Op>& ops, const pb::Message& parent,
                  const char* field, const Tree* tree, int checkpoint_depth, std::vector<Op>* out);

  const v1::Scenario& scenario_;
  std::string path_;
  const Tree* root_;
  std::unordered_map<std::string, uint32_t> ids_;
  CompiledScenario result_;
  std::string error_;
};

std::optional<CompiledScenario> Compiler::Compile(std::string* error) {
  result_.name = scenario_.name();
  if (scenario_.schema_version() > 1) {
    *error = Where(root_, scenario_, "schema_version", -1) + ": schema_version " +
             std::to_string(scenario_.schema_version()) + " is newer than this fp8audit (1)";
    return std::nullopt;
  }
  for (int i = 0; i < scenario_.modules_size(); ++i) {
    const v1::ModuleDecl& m = scenario_.modules(i);
    if (m.name().empty()) {
      *error = Where(root_, scenario_, "modules", i) + ": module without a name";
      return std::nullopt;
    }
    if (!ids_.emplace(m.name(), static_cast<uint32_t>(result_.modules.size())).second) {
      *error =
          Where(root_, scenario_, "modules", i) + ": module '" + m.name() + "' is declared twice";
      return std::nullopt;
    }
    ModuleSpec spec;
    spec.name = m.name();
    spec.kind = m.kind() == v1::LAYERNORM_LINEAR ? ModuleKind::kLayerNormLinear
                : m.kind() == v1::LAYERNORM_MLP  ? ModuleKind::kLayerNormMlp
                                                 : ModuleKind::kLinear;
    spec.eval = m.eval();
    spec.frozen = m.frozen();
    result_.modules.push_back(std::move(spec));
  }
  if (!CompileOps(scenario_.program(), scenario_, "program", root_, 0, &result_.program)) {
    *error = error_;
    return std::nullopt;
  }
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
  const bool delayed = scenario_.recipe().kind() != v1::CURRENT_SCALING;
  result_.expect_forward =
      scenario_.has_expect_forward() ? scenario_.expect_forward() : (delayed ? 1 : 0);
  result_.expect_backward =
      scenario_.has_expect_backward() ? scenario_.expect_backward() : (delayed ? 1 : 0);
  return std::move(result_);
}

bool Compiler::CompileOps(const pb::RepeatedPtrField<v1::Op>& ops, const pb::Message& parent,
                          const char* field, const Tree* tree, int checkpoint_depth,
                          std::vector<Op>* out) {
  const bool default_delayed = scenario_.recipe().kind() != v1::CURRENT_SCALING;
  out->reserve(ops.size());
  for (int i = 0; i < ops.size(); ++i) {
    const v1::Op& in = ops.Get(i);
    const Tree* t = Nested(tree, parent, field, i);
    const std::string where = Where(tree, parent, field, i);
    Op op;
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
                        checkpoint_depth, &op.body)) {
          return false;
        }
        break;
      }
      case v1::Op::kCheckpoint:
        op.kind = OpKind::kCheckpoint;
        op.checkpoint = in.checkpoint().kind() == v1::NON_REENTRANT ? CheckpointKind::kNonReentrant
                                                                    : CheckpointKind::kReentrant;
        if (!CompileOps(in.checkpoint().body(), in.checkpoint(), "body",
                        Nested(t, in, "checkpoint", -1), checkpoint_depth + 1, &op.body)) {
          return false;
        }
        break;
      case v1::Op::kGradMode:
        op.kind = OpKind::kGradMode;
        op.enabled = in.grad_mode().enabled();
        if (!CompileOps(in.grad_mode().body(), in.grad_mode(), "body",
                        Nested(t, in, "grad_mode", -1), checkpoint_depth, &op.body)) {
          return false;
        }
        break;
      case v1::Op::kFail:
        op.kind = OpKind::kFail;
        op.fail_where = in.fail().where();
        op.microbatches.assign(in.fail().microbatches().begin(), in.fail().microbatches().end());
        if (op.fail_where != v1::Fail::ORIGINAL_FORWARD && checkpoint_depth == 0) {
          result_.impossible.push_back(where +
                                       ": a recompute failure outside any checkpoint never fires");
        }
        break;
      case v1::Op::kTry:
        op.kind = OpKind::kTry;
        if (!CompileOps(in.try_().body(), in.try_(), "body", Nested(t, in, "try", -1),
                        checkpoint_depth, &op.body)) {
          return false;
        }
        break;
      case v1::Op::kBackward:
        op.kind = OpKind::kBackward;
        result_.has_backward_op = true;
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
                        checkpoint_depth, &op.body)) {
          return false;
        }
        break;
      case v1::Op::OP_NOT_SET:
        error_ = where +
                 ": empty op (expected call, autocast, checkpoint, grad_mode, fail, try, "
                 "backward or repeat)";
        return false;
    }
    out->push_back(std::move(op));
  }
  return true;
}

}  // namespace

std::optional<v1::Scenario> ParseScenarioText(const std::string& text, const std::string& path,
                                              std::string* error) {
  pb::TextFormat::Parser parser;
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open the scenario file";
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseScenarioText(text.str(), path, error);
}

std::optional<CompiledScenario> CompileScenario(const v1::Scenario& scenario, std::string* error,
                                                const std::string& path) {
  return Compiler(scenario, path, nullptr).Compile(error);
}

std::optional<CompiledScenario> LoadAndCompileScenario(const std::string& path,
                                                       std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open the scenario file";
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  pb::TextFormat::Parser parser;
  FirstError errors(path);
  parser.RecordErrorsTo(&errors);
  Tree tree;
  parser.WriteLocationsTo(&tree);
  v1::Scenario scenario;
  if (!parser.ParseFromString(text.str(), &scenario)) {
    *error = errors.error().empty() ? path + ": not a valid scenario" : errors.error();
    return std::nullopt;
  }
  return Compiler(scenario, path, &tree).Compile(error);
}

}  // namespace fp8audit::state
