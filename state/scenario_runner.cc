#include "state/scenario_runner.h"

#include <algorithm>
#include <optional>
#include <span>

#include "fp8audit/vocabulary_proto.h"
#include "state/explain.h"

namespace fp8audit::state {

namespace {

// A node of the autograd graph recorded during a forward.
struct Node {
  std::optional<CheckpointKind> checkpoint;  // nullopt: a module's node
  ModuleCtx ctx;                             // a module's
  uint32_t frame = 0;                        // a checkpoint's
  bool own_autograd_task = false;            // a reentrant one's nested backward (Op)
  bool schedule_node = false;                // a ScheduleNode's graph, in `saved`
  const std::vector<Op>* body = nullptr;
  std::vector<Node> saved;  // non-reentrant: the original graph of the region; a schedule node's
};

// Where ops execute.
struct Context {
  std::vector<Node>* tape = nullptr;  // graph being recorded; null: none kept
  bool recompute = false;             // directly inside a checkpoint body being recomputed
  bool top_level = false;             // the microbatch's own program (not a checkpoint body)
};

class Runner {
 public:
  Runner(const CompiledScenario& scenario, const RunOptions& options)
      : sc_(scenario),
        model_(options.semantics, static_cast<uint32_t>(scenario.modules.size())),
        eval_(scenario.modules.size()),
        backward_scopes_(RulesOf(options.semantics).backward_update_per_autograd_task) {
    model_.set_record_events(options.record_events);
  }

  RunOutcome Run(uint32_t microbatches);

 private:
  bool Exec(const std::vector<Op>& ops, const Context& cx);
  bool ExecOne(const Op& op, const Context& cx);
  bool Backward();
  // One backward() call (an autograd task) over `tape`.
  bool BackwardCall(std::span<Node> tape);
  bool Backprop(std::span<Node> tape);
  bool Recompute(Node& node, std::vector<Node>* tape);
  bool Fires(const Op& op) const {
    return op.microbatches.empty() ||
           std::binary_search(op.microbatches.begin(), op.microbatches.end(), mb_);
  }
  bool EntryFails(const std::vector<Op>& body) const {
    for (const Op& op : body) {
      if (op.kind == OpKind::kFail && op.fail_where == v1::Fail::RECOMPUTE_ENTRY && Fires(op)) {
        return true;
      }
    }
    return false;
  }

  const CompiledScenario& sc_;
  OwnershipModel model_;
  std::vector<uint8_t> eval_;  // current mode per module
  // The release has quantization_backward_scope (TE PR #3456); elsewhere it is a nullcontext.
  bool backward_scopes_ = false;
  std::vector<Node> tape_;  // the microbatch's graph
  bool act_requires_grad_ = true;
  bool raised_ = false;  // a fail op fired in this microbatch
  uint32_t mb_ = 0;
  uint64_t ops_ = 0;  // ops executed (RunOutcome::ops_executed)
};

bool Runner::Exec(const std::vector<Op>& ops, const Context& cx) {
  for (const Op& op : ops) {
    if (!ExecOne(op, cx)) return false;
  }
  return true;
}

bool Runner::ExecOne(const Op& op, const Context& cx) {
  ++ops_;
  switch (op.kind) {
    case OpKind::kCall: {
      const ModuleSpec& spec = sc_.modules[op.module];
      ModuleInfo info;
      info.id = op.module;
      info.kind = spec.kind;
      info.training = !eval_[op.module];
      info.requires_grad = act_requires_grad_ || !spec.frozen;
      const bool grad = model_.grad_enabled();
      ModuleCtx ctx = model_.ModuleForward(info);
      if (ctx.raised) {
        model_.Mark(v1::EXCEPTION);
        return false;
      }
      if (ctx.has_ctx && cx.tape) {
        Node n;
        n.ctx = ctx;
        cx.tape->push_back(std::move(n));
      }
      act_requires_grad_ = grad && info.requires_grad;
      return true;
    }
    case OpKind::kAutocast: {
      model_.AutocastEnter(op.enabled, op.delayed);
      bool ok = Exec(op.body, cx);
      if (ok && cx.top_level && sc_.backward_inside_autocast && !sc_.has_backward_op &&
          model_.autocast_depth() == 1) {
        ok = Backward();
      }
      model_.AutocastExit(!ok);
      return ok;
    }
    case OpKind::kCheckpoint: {
      const bool entry_requires_grad = act_requires_grad_;
      const bool caller_grad = model_.grad_enabled();
      const CheckpointEntry entry = model_.CheckpointEnter(op.checkpoint, entry_requires_grad);
      Context inner = cx;
      inner.recompute = false;
      inner.top_level = false;
      if (entry.direct) {
        const bool ok = Exec(op.body, inner);
        model_.CheckpointExit(entry.frame, !ok);
        return ok;
      }
      Node node;
      node.checkpoint = op.checkpoint;
      node.frame = entry.frame;
      node.own_autograd_task = op.own_autograd_task;
      node.body = &op.body;
      inner.tape = op.checkpoint == CheckpointKind::kNonReentrant ? &node.saved : nullptr;
      const bool ok = Exec(op.body, inner);
      model_.CheckpointExit(entry.frame, !ok);
      if (!ok) return false;
      if (op.checkpoint == CheckpointKind::kReentrant) {
        // The autograd Function's output requires grad only when an input does.
        act_requires_grad_ = entry_requires_grad && caller_grad;
        if (entry.records_node && act_requires_grad_ && cx.tape)
          cx.tape->push_back(std::move(node));
      } else if (entry.records_node && cx.tape) {
        cx.tape->push_back(std::move(node));
      }
      return true;
    }
    case OpKind::kGradMode: {
      // A no-grad region is a side computation (an evaluation forward): its outputs feed nothing
      // recorded after it.
      const bool requires_grad = act_requires_grad_;
      model_.PushGrad(op.enabled);
      const bool ok = Exec(op.body, cx);
      model_.PopGrad();
      if (!op.enabled) act_requires_grad_ = requires_grad;
      return ok;
    }
    case OpKind::kFail: {
      const bool here = op.fail_where == v1::Fail::ORIGINAL_FORWARD ? !cx.recompute
                        : op.fail_where == v1::Fail::RECOMPUTE      ? cx.recompute
                                                                    : false;
      if (!here || !Fires(op)) return true;
      // Raised in a recompute, it ends the backward pass (caught or not); one in the original
      // forward that a try catches does not.
      if (cx.recompute) raised_ = true;
      model_.Mark(v1::EXCEPTION);
      return false;
    }
    case OpKind::kTry: {
      const size_t mark = cx.tape ? cx.tape->size() : 0;
      const bool requires_grad = act_requires_grad_;
      if (Exec(op.body, cx)) return true;
      // Caught: what the failed body recorded is unreachable from anything computed later.
      if (cx.tape) cx.tape->resize(mark);
      act_requires_grad_ = requires_grad;
      return true;
    }
    case OpKind::kBackward:
      return Backward();
    case OpKind::kBackwardScope: {
      if (!backward_scopes_) return Exec(op.body, cx);
      model_.BackwardScopeEnter();
      const bool ok = Exec(op.body, cx);
      model_.BackwardScopeExit();  // TE's exit is in `finally`: also when the body raised
      return ok;
    }
    case OpKind::kScheduleNode: {
      // The node's input is detached (requiring grad as before) and so is its output: its graph is
      // a piece of its own, backpropagated by its own backward() call.
      Node node;
      node.schedule_node = true;
      Context inner = cx;
      inner.tape = cx.tape ? &node.saved : nullptr;
      inner.top_level = false;
      const bool ok = Exec(op.body, inner);
      if (ok && cx.tape && !node.saved.empty()) cx.tape->push_back(std::move(node));
      return ok;
    }
    case OpKind::kRepeat:
      for (uint32_t i = 0; i < op.count; ++i) {
        ++ops_;
        if (!Exec(op.body, cx)) return false;
      }
      return true;
  }
  return true;
}

bool Runner::Backward() {
  // Without schedule nodes, one backward() over the whole graph. With them, one per node, last to
  // first (its run_backward), and one per stretch of graph recorded outside nodes (the loss's
  // first); an exception in one ends the schedule.
  bool ok = true;
  if (std::none_of(tape_.begin(), tape_.end(), [](const Node& n) { return n.schedule_node; })) {
    ok = BackwardCall(tape_);
  } else {
    for (size_t end = tape_.size(); ok && end > 0;) {
      if (tape_[end - 1].schedule_node) {
        ok = BackwardCall(tape_[--end].saved);
        continue;
      }
      size_t begin = end;
      while (begin > 0 && !tape_[begin - 1].schedule_node) --begin;
      ok = BackwardCall(std::span<Node>(tape_).subspan(begin, end - begin));
      end = begin;
    }
  }
  tape_.clear();
  return ok;
}

bool Runner::BackwardCall(std::span<Node> tape) {
  model_.SetBackwardPass(true);
  const bool ok = Backprop(tape);
  while (!ok && model_.open_autograd_tasks() != 0) model_.EndAutogradTask(/*failed=*/true);
  model_.SetBackwardPass(false);
  return ok;
}

bool Runner::Recompute(Node& node, std::vector<Node>* tape) {
  if (!model_.RecomputeEnter(node.frame, EntryFails(*node.body))) {
    raised_ = true;
    model_.Mark(v1::EXCEPTION);
    return false;
  }
  const bool requires_grad = act_requires_grad_;
  act_requires_grad_ = true;  // detached inputs that require grad
  Context cx;
  cx.tape = tape;
  cx.recompute = true;
  const bool ok = Exec(*node.body, cx);
  model_.RecomputeExit(node.frame, !ok);
  act_requires_grad_ = requires_grad;
  return ok;
}

bool Runner::Backprop(std::span<Node> tape) {
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    Node& node = *it;
    if (node.schedule_node) {
      if (!Backprop(node.saved)) return false;  // not reached: nodes are top-level pieces
    } else if (!node.checkpoint) {
      model_.ModuleBackward(node.ctx);
    } else if (*node.checkpoint == CheckpointKind::kReentrant) {
      // Recompute under enable_grad, then backward through the recomputed graph: a nested
      // autograd task of its own for torch's checkpoint (TE's counts on the outer task).
      std::vector<Node> recomputed;
      if (!Recompute(node, &recomputed)) return false;
      if (node.own_autograd_task) model_.BeginAutogradTask(node.frame);
      if (!Backprop(recomputed)) return false;
      if (node.own_autograd_task) model_.EndAutogradTask();
    } else {
      // Non-reentrant: the first saved tensor unpacked triggers the recompute; its graph is
      // discarded and backward proceeds through the original graph.
      if (!node.saved.empty() && !Recompute(node, nullptr)) return false;
      if (!Backprop(node.saved)) return false;
    }
  }
  return true;
}

RunOutcome Runner::Run(uint32_t microbatches) {
  RunOutcome out;
  out.semantics = model_.semantics();
  out.expect_forward = sc_.expect_forward;
  out.expect_backward = sc_.expect_backward;
  for (const std::string& problem : sc_.impossible) {
    v1::Violation v;
    v.set_kind(v1::Violation::UNBALANCED);
    v.set_message(problem);
    out.violations.push_back(std::move(v));
  }
  uint32_t step = 0;
  for (mb_ = 0; mb_ < microbatches; ++mb_) {
    for (size_t i = 0; i < eval_.size(); ++i) eval_[i] = sc_.modules[i].eval;
    act_requires_grad_ = sc_.input_requires_grad;
    tape_.clear();
    const uint64_t f0 = model_.forward_updates();
    const uint64_t b0 = model_.backward_updates();
    const uint64_t fa0 = model_.forward_advancing_updates();
    const uint64_t ba0 = model_.backward_advancing_updates();
    const size_t e0 = model_.events().size();
    const uint32_t first_frame = model_.next_frame_id();
    model_.BeginMicrobatch(mb_);
    ops_ += 1 + eval_.size();

    Context top;
    top.tape = &tape_;
    top.top_level = true;
    raised_ = false;
    bool ok = Exec(sc_.program, top);
    if (ok) {
      for (const auto& [module, eval] : sc_.after_forward) eval_[module] = eval;
      if (!sc_.has_backward_op && !(sc_.backward_inside_autocast && tape_.empty())) {
        ok = Backward();
      }
    }
    model_.EndMicrobatch();

    MicrobatchOutcome m;
    m.index = mb_;
    m.step = step;
    m.forward_updates = model_.forward_updates() - f0;
    m.backward_updates = model_.backward_updates() - b0;
    m.forward_advancing = model_.forward_advancing_updates() - fa0;
    m.backward_advancing = model_.backward_advancing_updates() - ba0;
    m.aborted = !ok;
    m.raised = raised_;
    if (!ok) {
      v1::Violation v;
      v.set_kind(v1::Violation::UNBALANCED);
      v.set_microbatch(mb_);
      v.set_message("an exception escaped microbatch " + std::to_string(mb_));
      model_.mutable_violations()->push_back(std::move(v));
    }
    if (m.forward_updates != sc_.expect_forward || m.backward_updates != sc_.expect_backward) {
      m.explanations = Explain(sc_, model_.events(), e0, first_frame, sc_.expect_forward,
                               sc_.expect_backward, m.forward_updates, m.backward_updates);
    }
    out.microbatches.push_back(std::move(m));
    if (sc_.microbatches_per_step && (mb_ + 1) % sc_.microbatches_per_step == 0) {
      model_.Mark(v1::STEP);
      ++step;
    }
  }
  for (auto& v : *model_.mutable_violations()) out.violations.push_back(std::move(v));
  out.event_count = model_.events().size();
  out.ops_executed = ops_;
  out.events = std::move(*model_.mutable_events());
  return out;
}

}  // namespace

ExtraUpdates ClassifyExtra(uint64_t updates, uint64_t advancing, uint64_t expected) {
  ExtraUpdates e;
  if (updates <= expected) return e;
  const uint64_t extra = updates - expected;
  e.harmful = std::min(extra, advancing > expected ? advancing - expected : 0);
  e.wasted = extra - e.harmful;
  return e;
}

bool RunOutcome::passed() const {
  if (!violations.empty()) return false;
  for (const auto& m : microbatches) {
    if (m.aborted || m.forward_updates != expect_forward || m.backward_updates != expect_backward) {
      return false;
    }
  }
  return true;
}

RunOutcome RunScenario(const CompiledScenario& scenario, const RunOptions& options) {
  Runner runner(scenario, options);
  return runner.Run(options.microbatches ? options.microbatches : scenario.microbatches);
}

v1::ModelResult ToModelResult(const CompiledScenario& scenario, const RunOutcome& outcome) {
  v1::ModelResult r;
  r.set_semantics(std::string(SemanticsName(outcome.semantics)));
  r.set_scenario(scenario.name);
  for (const auto& m : outcome.microbatches) {
    auto* out = r.add_microbatches();
    out->set_index(m.index);
    out->set_step(m.step);
    out->set_forward_updates(static_cast<uint32_t>(m.forward_updates));
    out->set_backward_updates(static_cast<uint32_t>(m.backward_updates));
    out->set_expected_forward(outcome.expect_forward);
    out->set_expected_backward(outcome.expect_backward);
    const bool ok = !m.aborted && m.forward_updates == outcome.expect_forward &&
                    m.backward_updates == outcome.expect_backward;
    out->set_verdict(ok ? v1::PASS : v1::FAIL);
    for (const auto& e : m.explanations) out->add_explanations(e);
    const ExtraUpdates f =
        ClassifyExtra(m.forward_updates, m.forward_advancing, outcome.expect_forward);
    const ExtraUpdates b =
        ClassifyExtra(m.backward_updates, m.backward_advancing, outcome.expect_backward);
    out->set_harmful_forward(static_cast<uint32_t>(f.harmful));
    out->set_harmful_backward(static_cast<uint32_t>(b.harmful));
    out->set_wasted_forward(static_cast<uint32_t>(f.wasted));
    out->set_wasted_backward(static_cast<uint32_t>(b.wasted));
    r.set_harmful_updates(r.harmful_updates() + f.harmful + b.harmful);
    r.set_wasted_updates(r.wasted_updates() + f.wasted + b.wasted);
  }
  for (const auto& v : outcome.violations) *r.add_violations() = v;
  r.set_verdict(outcome.passed() ? v1::PASS : v1::FAIL);
  return r;
}

v1::ModelResult ToModelResult(const CompiledScenario& scenario, RunOutcome&& outcome) {
  std::vector<std::vector<std::string>> explanations(outcome.microbatches.size());
  for (size_t i = 0; i < explanations.size(); ++i) {
    explanations[i].swap(outcome.microbatches[i].explanations);
  }
  outcome.events = {};
  v1::ModelResult r = ToModelResult(scenario, outcome);
  for (size_t i = 0; i < explanations.size(); ++i) {
    for (std::string& e : explanations[i])
      r.mutable_microbatches(static_cast<int>(i))->add_explanations(std::move(e));
    explanations[i] = {};
  }
  return r;
}

v1::Event ToTraceEvent(const CompiledScenario& scenario, const ModelEvent& event) {
  v1::Event e;
  e.set_kind(event.kind);
  e.set_source(v1::MODEL);
  e.set_pass(event.backward_pass ? v1::BACKWARD : v1::FORWARD);
  e.set_frame(event.frame);
  e.set_checkpoint_phase(event.phase);
  if (event.frame) {
    e.set_checkpoint_kind(ToProto(event.checkpoint_kind));
  }
  if (event.module != kNone && event.module < scenario.modules.size()) {
    e.set_module(scenario.modules[event.module].name);
  }
  e.set_autocast_depth(event.depth);
  e.set_failed(event.failed);
  return e;
}

}  // namespace fp8audit::state
