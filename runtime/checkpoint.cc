#include "runtime/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fp8audit::runtime {
namespace {

using torch::autograd::variable_list;

void Report(const char* where, const std::exception& e) {
  std::cerr << "fp8audit runtime: error while " << where << ": " << e.what() << "\n";
}

// Closes a checkpoint frame's phase 1; as failed when left through an exception.
class FrameScope {
 public:
  FrameScope(StateManager& mgr, uint32_t frame) : mgr_(mgr), frame_(frame) {}
  ~FrameScope() {
    if (open_) {
      try {
        mgr_.CheckpointExit(frame_, /*failed=*/true);
      } catch (const std::exception& e) {
        Report("closing a failed checkpoint frame", e);
      }
    }
  }
  void Close() {
    open_ = false;
    mgr_.CheckpointExit(frame_, /*failed=*/false);
  }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;

 private:
  StateManager& mgr_;
  uint32_t frame_;
  bool open_ = true;
};

// Phase 2 of a frame: RecomputeEnter in the constructor (throws when it cannot start),
// RecomputeExit in Close() or, failed, in the destructor.
class RecomputeScope {
 public:
  RecomputeScope(StateManager& mgr, uint32_t frame) : mgr_(mgr), frame_(frame) {
    mgr_.RecomputeEnter(frame_);
  }
  ~RecomputeScope() {
    if (open_) {
      try {
        mgr_.RecomputeExit(frame_, /*failed=*/true);
      } catch (const std::exception& e) {
        Report("rolling back a failed recompute", e);
      }
    }
  }
  void Close() {
    open_ = false;
    mgr_.RecomputeExit(frame_, /*failed=*/false);
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  StateManager& mgr_;
  uint32_t frame_;
  bool open_ = true;
};

class CaptureScope {
 public:
  CaptureScope(StateManager& mgr, std::shared_ptr<NonReentrantFrame> frame, bool recompute)
      : mgr_(mgr) {
    mgr_.PushCapture(std::move(frame), recompute);
  }
  ~CaptureScope() { mgr_.PopCapture(); }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  StateManager& mgr_;
};

std::vector<at::Tensor> Detach(const std::vector<at::Tensor>& inputs,
                               const std::vector<bool>& requires_grad) {
  std::vector<at::Tensor> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    out[i] = inputs[i].detach();
    if (requires_grad[i]) out[i].requires_grad_(true);
  }
  return out;
}

class ReentrantCheckpointBackward : public torch::autograd::Node {
 public:
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "fp8audit::ReentrantCheckpointBackward"; }
  void release_variables() override { inputs.clear(); }

  uint32_t frame = 0;
  CheckpointFunction fn;
  std::vector<at::Tensor> inputs;  // detached
  std::vector<bool> requires_grad;
  std::vector<size_t> output_of_input;  // node input j is fn's output output_of_input[j]
  size_t num_outputs = 0;
};

variable_list ReentrantCheckpointBackward::apply(variable_list&& grads) {
  StateManager& mgr = StateManager::Get();
  if (inputs.empty() && !requires_grad.empty()) {
    throw std::runtime_error(
        "fp8audit checkpoint: backward through a reentrant checkpoint a second time (its inputs "
        "were released; use retain_graph)");
  }
  std::vector<at::Tensor> detached = Detach(inputs, requires_grad);
  std::vector<at::Tensor> outputs;
  {
    RecomputeScope recompute(mgr, frame);
    {
      CaptureScope capture(mgr, nullptr, false);
      at::AutoGradMode grad(true);
      outputs = fn(detached);
    }
    recompute.Close();
  }
  if (outputs.size() != num_outputs) {
    throw std::runtime_error("fp8audit checkpoint: the recompute of frame " +
                             std::to_string(frame) + " returned " + std::to_string(outputs.size()) +
                             " outputs, the forward " + std::to_string(num_outputs));
  }
  std::vector<at::Tensor> roots, root_grads;
  for (size_t j = 0; j < grads.size(); ++j) {
    const at::Tensor& out = outputs[output_of_input[j]];
    if (grads[j].defined() && out.defined() && out.requires_grad()) {
      roots.push_back(out);
      root_grads.push_back(grads[j]);
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, root_grads);
  variable_list result(detached.size());
  for (size_t i = 0; i < detached.size(); ++i) {
    if (requires_grad[i] && detached[i].defined()) result[i] = detached[i].grad();
  }
  return result;
}

void CheckArguments(const CheckpointFunction& fn, const std::vector<at::Tensor>& inputs,
                    CheckpointKind kind) {
  if (!fn) {
    throw std::invalid_argument(
        "fp8audit checkpoint: argument 'fn' is not callable (an empty function)");
  }
  if (kind != CheckpointKind::kReentrant && kind != CheckpointKind::kNonReentrant) {
    throw std::invalid_argument("fp8audit checkpoint: argument 'kind' must be " +
                                std::string(CheckpointKindName(CheckpointKind::kReentrant)) +
                                " or " +
                                std::string(CheckpointKindName(CheckpointKind::kNonReentrant)) +
                                ", got value " + std::to_string(static_cast<int>(kind)));
  }
  if (inputs.empty()) {
    throw std::invalid_argument("fp8audit checkpoint: argument 'inputs' is empty");
  }
  bool any_requires_grad = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      throw std::invalid_argument("fp8audit checkpoint: argument 'inputs[" + std::to_string(i) +
                                  "]' is an undefined tensor");
    }
    any_requires_grad = any_requires_grad || inputs[i].requires_grad();
  }
  if (kind == CheckpointKind::kReentrant && at::GradMode::is_enabled() && !any_requires_grad) {
    throw std::invalid_argument(
        "fp8audit checkpoint: argument 'inputs': none of the " + std::to_string(inputs.size()) +
        " input(s) requires grad, so a reentrant checkpoint's output would not require grad and "
        "nothing inside it would receive a gradient (make an input require grad, use "
        "non-reentrant, or run under no_grad)");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// NonReentrantFrame

NonReentrantFrame::NonReentrantFrame(uint32_t frame, CheckpointFunction fn,
                                     const std::vector<at::Tensor>& inputs)
    : frame_(frame), fn_(std::move(fn)) {
  requires_grad_.reserve(inputs.size());
  for (const at::Tensor& t : inputs) requires_grad_.push_back(t.defined() && t.requires_grad());
  inputs_ = Detach(inputs, std::vector<bool>(inputs.size(), false));
}

uint32_t NonReentrantFrame::AddSlot(uint32_t module) {
  slot_modules_.push_back(module);
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

void NonReentrantFrame::Fill(uint32_t index, uint32_t module, const SavedActivations& saved) {
  if (index >= slots_.size() || slot_modules_[index] != module) {
    throw std::runtime_error(
        "fp8audit checkpoint: the recompute of non-reentrant frame " + std::to_string(frame_) +
        " diverged from its original forward at FP8 call #" + std::to_string(index) +
        (index < slots_.size() ? " (module " + std::to_string(module) + ", was module " +
                                     std::to_string(slot_modules_[index]) + ")"
                               : std::string(" (the original forward made fewer calls)")));
  }
  slots_[index] = saved;
}

SavedActivations NonReentrantFrame::Take(uint32_t index) {
  if (!recomputed_) Recompute();
  if (index >= slots_.size() || !slots_[index].filled) {
    throw std::runtime_error("fp8audit checkpoint: activations of FP8 call #" +
                             std::to_string(index) + " in non-reentrant frame " +
                             std::to_string(frame_) + " are gone (backward ran twice?)");
  }
  return std::exchange(slots_[index], SavedActivations());
}

void NonReentrantFrame::Recompute() {
  StateManager& mgr = StateManager::Get();
  try {
    RecomputeScope recompute(mgr, frame_);
    {
      CaptureScope capture(mgr, shared_from_this(), true);
      at::AutoGradMode grad(true);
      std::vector<at::Tensor> detached = Detach(inputs_, requires_grad_);
      (void)fn_(detached);  // the recomputed graph is discarded
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].filled) {
        throw std::runtime_error("fp8audit checkpoint: the recompute of non-reentrant frame " +
                                 std::to_string(frame_) +
                                 " made fewer FP8 calls than its "
                                 "original forward (" +
                                 std::to_string(i) + " of " + std::to_string(slots_.size()) + ")");
      }
    }
    recompute.Close();
  } catch (...) {
    for (auto& s : slots_) s = SavedActivations();
    throw;
  }
  recomputed_ = true;
}

// ---------------------------------------------------------------------------------------------
// checkpoint()

std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn,
                                   const std::vector<at::Tensor>& inputs, CheckpointKind kind) {
  CheckArguments(fn, inputs, kind);
  StateManager& mgr = StateManager::Get();
  const bool grad_at_entry = at::GradMode::is_enabled();
  const state::CheckpointEntry entry = mgr.CheckpointEnter(kind);
  FrameScope scope(mgr, entry.frame);

  if (entry.direct) {
    std::vector<at::Tensor> outputs;
    {
      CaptureScope capture(mgr, nullptr, false);
      outputs = fn(inputs);
    }
    scope.Close();
    return outputs;
  }

  if (kind == CheckpointKind::kNonReentrant) {
    auto frame = std::make_shared<NonReentrantFrame>(entry.frame, fn, inputs);
    std::vector<at::Tensor> outputs;
    {
      CaptureScope capture(mgr, frame, false);
      outputs = fn(inputs);
    }
    scope.Close();
    return outputs;
  }

  // Reentrant: the original forward runs without grad.
  std::vector<at::Tensor> outputs;
  {
    CaptureScope capture(mgr, nullptr, false);
    at::NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  scope.Close();

  bool any_requires_grad = false;
  for (const at::Tensor& t : inputs) any_requires_grad = any_requires_grad || t.requires_grad();
  if (!grad_at_entry || !any_requires_grad) return outputs;

  auto node = std::shared_ptr<ReentrantCheckpointBackward>(new ReentrantCheckpointBackward(),
                                                           torch::autograd::deleteNode);
  node->frame = entry.frame;
  node->fn = fn;
  node->requires_grad.reserve(inputs.size());
  for (const at::Tensor& t : inputs) node->requires_grad.push_back(t.requires_grad());
  node->inputs = Detach(inputs, std::vector<bool>(inputs.size(), false));
  node->num_outputs = outputs.size();
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    at::Tensor& out = outputs[i];
    if (!out.defined() || !at::isFloatingType(out.scalar_type())) continue;
    bool alias = out.is_view() || out.requires_grad();
    for (const at::Tensor& in : inputs) alias = alias || out.is_same(in);
    if (alias) {
      at::NoGradGuard no_grad;
      out = out.clone();
    }
    node->output_of_input.push_back(i);
    torch::autograd::create_gradient_edge(out, node);
  }
  return outputs;
}

at::Tensor checkpoint(const CheckpointFunction1& fn, const at::Tensor& input, CheckpointKind kind) {
  if (!fn) {
    throw std::invalid_argument(
        "fp8audit checkpoint: argument 'fn' is not callable (an empty function)");
  }
  CheckpointFunction wrapped = [fn](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{fn(in.at(0))};
  };
  return checkpoint(wrapped, std::vector<at::Tensor>{input}, kind).at(0);
}

}  // namespace fp8audit::runtime
