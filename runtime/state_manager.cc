#include "runtime/state_manager.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <utility>

#include "runtime/backend.h"

#if FP8AUDIT_RUNTIME_NVTX
#include "fp8audit/nvtx_events.h"
#endif

namespace fp8audit::runtime {
namespace {

namespace v1 = ::fp8audit::v1;

constexpr size_t kMaxViolationsKept = 1000;

// Adds the time of one transition (lock held) to *ns and one to *calls, when `on`.
class Timer {
 public:
  Timer(bool on, uint64_t* ns, uint64_t* calls)
      : ns_(on ? ns : nullptr), calls_(calls), start_(on ? Clock::now() : Clock::time_point()) {}
  ~Timer() {
    if (ns_) {
      *ns_ += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
      ++*calls_;
    }
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  uint64_t* ns_;
  uint64_t* calls_;
  Clock::time_point start_;
};

const DelayedScaling& DefaultRecipe() {
  static const DelayedScaling recipe;
  return recipe;
}

}  // namespace

const float* ModuleCall::forward_scale(int i) const {
  if (recompute) return stashed->scales.data_ptr<float>() + stashed_base + i;
  return buffers->fwd_scale.data_ptr<float>() + fwd_base + i;
}

float* ModuleCall::forward_amax(int i) const {
  if (recompute) return discard.data_ptr<float>() + i;
  return buffers->fwd_history.data_ptr<float>() + fwd_base + i;  // row 0
}

StateManager& StateManager::Get() {
  // Never destroyed: autograd graphs and modules may outlive static destruction order.
  static StateManager* manager = new StateManager();
  return *manager;
}

StateManager::StateManager() { ResetLocked(); }

void StateManager::ResetLocked() {
  model_ = std::make_unique<state::OwnershipModel>(options_.semantics,
                                                   static_cast<uint32_t>(modules_.size()));
  model_->set_record_events(true);
  buffers_.clear();
  autocasts_.clear();
  frames_.clear();
  open_frames_.clear();
  recomputes_.clear();
  frame_stash_.clear();
  module_stash_.assign(modules_.size(), {});
  captures_.clear();
  discard_.clear();
  marks_.clear();
  sync_ = 0;
  violations_.clear();
  violations_seen_ = 0;
  bookkeeping_ns_ = 0;
  bookkeeping_calls_ = 0;
  microbatch_ = 0;
  for (auto& m : modules_) m.has_recipe = false;
}

void StateManager::Configure(const RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!autocasts_.empty() || !open_frames_.empty() || !recomputes_.empty()) {
    throw std::logic_error(
        "fp8audit runtime: Configure called while an autocast or a checkpoint is open");
  }
  if (!RuntimeImplements(options.semantics)) {
    throw std::invalid_argument("fp8audit runtime: " + NotImplementedLine(options.semantics));
  }
  options_ = options;
  ResetLocked();
}

RuntimeOptions StateManager::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

uint32_t StateManager::RegisterModule(const std::string& name, state::ModuleKind kind,
                                      int forward_tensors, int backward_tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  ModuleEntry e;
  e.name = name.empty() ? "module" + std::to_string(modules_.size()) : name;
  for (char& c : e.name) {
    if (c == ' ' || c == '=' || c == '\t' || c == '\n') c = '_';
  }
  e.kind = kind;
  e.forward_tensors = forward_tensors;
  e.backward_tensors = backward_tensors;
  modules_.push_back(std::move(e));
  const auto count = static_cast<uint32_t>(modules_.size());
  model_->AddModules(count);
  module_stash_.resize(count);
  return count - 1;
}

// ---------------------------------------------------------------------------------------------
// Observations

uint64_t StateManager::forward_updates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_->forward_updates();
}

uint64_t StateManager::backward_updates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_->backward_updates();
}

size_t StateManager::stash_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [frame, d] : frame_stash_) n += d.size();
  for (const auto& d : module_stash_) n += d.size();
  return n;
}

size_t StateManager::open_scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return autocasts_.size() + open_frames_.size() + recomputes_.size();
}

uint32_t StateManager::autocast_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_->autocast_depth();
}

bool StateManager::fp8_enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !autocasts_.empty() && autocasts_.back().enabled;
}

std::vector<std::string> StateManager::TakeViolations() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(violations_, {});
}

uint64_t StateManager::bookkeeping_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bookkeeping_ns_;
}

uint64_t StateManager::bookkeeping_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bookkeeping_calls_;
}

float StateManager::forward_scale(uint32_t module, int i) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& b : buffers_) {
    auto it = b->slots.find(module);
    if (it != b->slots.end()) {
      return b->fwd_scale[it->second.first + i].to(at::kCPU).item<float>();
    }
  }
  throw std::out_of_range("fp8audit runtime: module " + std::to_string(module) +
                          " has no FP8 state yet");
}

// ---------------------------------------------------------------------------------------------
// Grad mode: the model mirrors torch's grad mode. The runtime's own changes (a reentrant
// checkpoint's no_grad, a recompute's enable_grad) are made by the model itself; any other
// difference found at a transition (the user's no_grad / enable_grad) is pushed as a grad-mode
// entry, popped when torch's mode returns or when the scope it was pushed in closes.

void StateManager::SyncGradLocked() {
  const bool torch_grad = at::GradMode::is_enabled();
  const size_t mark = marks_.empty() ? 0 : marks_.back();
  while (model_->grad_enabled() != torch_grad && sync_ > mark) {
    model_->PopGrad();
    --sync_;
  }
  if (model_->grad_enabled() != torch_grad) {
    model_->PushGrad(torch_grad);
    ++sync_;
  }
}

void StateManager::PopSyncLocked(size_t mark) {
  while (sync_ > mark) {
    model_->PopGrad();
    --sync_;
  }
}

// ---------------------------------------------------------------------------------------------
// Buffers

std::shared_ptr<ScalingBuffers> StateManager::BuffersLocked(const DelayedScaling& recipe,
                                                            const at::Device& device) {
  for (const auto& b : buffers_) {
    if (b->recipe == recipe && b->device == device) return b;
  }
  auto b = std::make_shared<ScalingBuffers>();
  b->recipe = recipe;
  b->device = device;
  buffers_.push_back(b);
  return b;
}

std::pair<int64_t, int64_t> StateManager::SlotsLocked(ScalingBuffers& b, uint32_t module) {
  const auto found = b.slots.find(module);
  if (found != b.slots.end()) return found->second;
  const ModuleEntry& m = modules_[module];
  const auto options = at::TensorOptions().dtype(at::kFloat).device(b.device);
  const int64_t len = b.recipe.amax_history_len;
  auto grow = [&](at::Tensor* history, at::Tensor* scale, at::Tensor* scale_inv, int64_t k) {
    const int64_t base = scale->defined() ? scale->size(0) : 0;
    at::Tensor h = at::zeros({len, k}, options);
    at::Tensor s = at::ones({k}, options);
    *history = history->defined() ? at::cat({*history, h}, 1).contiguous() : h;
    *scale = scale->defined() ? at::cat({*scale, s}) : s;
    *scale_inv = scale_inv->defined() ? at::cat({*scale_inv, s}) : s.clone();
    return base;
  };
  const int64_t fwd = grow(&b.fwd_history, &b.fwd_scale, &b.fwd_scale_inv, m.forward_tensors);
  const int64_t bwd = grow(&b.bwd_history, &b.bwd_scale, &b.bwd_scale_inv, m.backward_tensors);
  b.slots.emplace(module, std::make_pair(fwd, bwd));
  // A new tensor: entries of the previous version keep the old one, which no longer changes.
  b.fwd_version = std::make_shared<ScaleVersion>(ScaleVersion{b.fwd_scale});
  return {fwd, bwd};
}

const DelayedScaling* StateManager::CurrentRecipeLocked(uint32_t module) const {
  if (!autocasts_.empty() && autocasts_.back().enabled) return &autocasts_.back().recipe;
  if (modules_[module].has_recipe) return &modules_[module].last_recipe;
  return &DefaultRecipe();
}

void StateManager::UpdateLocked(bool forward) {
  for (const auto& b : buffers_) {
    if (!b->fwd_scale.defined()) continue;
    if (forward) {
      if (b->fwd_version && b->fwd_version.use_count() > 1) {
        // Stash entries share the current scales: they keep a copy (taken before the update, in
        // stream order), the buffer gets a new version.
        b->fwd_version->scales = b->fwd_scale.clone();
        b->fwd_version = std::make_shared<ScaleVersion>(ScaleVersion{b->fwd_scale});
      }
      backend::DelayedScalingUpdate(b->fwd_history, b->fwd_scale, b->fwd_scale_inv,
                                    b->recipe.forward_type(), b->recipe.margin,
                                    b->recipe.amax_compute_algo);
    } else {
      backend::DelayedScalingUpdate(b->bwd_history, b->bwd_scale, b->bwd_scale_inv,
                                    b->recipe.backward_type(), b->recipe.margin,
                                    b->recipe.amax_compute_algo);
    }
  }
}

std::deque<StateManager::StashEntry>& StateManager::StashFor(uint32_t module, uint32_t frame) {
  if (options_.semantics == state::Semantics::kTeLegacy) {
    if (module >= module_stash_.size()) module_stash_.resize(module + 1);
    return module_stash_[module];
  }
  return frame_stash_[frame];
}

// ---------------------------------------------------------------------------------------------
// Events: every model event becomes an action and/or a structured NVTX event.

void StateManager::EmitLocked(const state::ModelEvent& e) {
#if FP8AUDIT_RUNTIME_NVTX
  namespace nv = ::fp8audit::nvtx;
  // Without an NVTX tool the domain is null and every mark a no-op: format nothing.
  if (!options_.nvtx || nv::Domain() == nullptr) return;
  const CheckpointKind kind = e.checkpoint_kind;
  const char* name = e.module < modules_.size() ? modules_[e.module].name.c_str() : "";
  switch (e.kind) {
    case v1::AUTOCAST_ENTER:
      nv::AutocastEnter(e.depth);
      break;
    case v1::AUTOCAST_EXIT:
      nv::AutocastExit(e.depth, e.failed);
      break;
    case v1::CHECKPOINT_ENTER:
      nv::CheckpointEnter(e.frame, e.phase, kind);
      break;
    case v1::CHECKPOINT_EXIT:
      nv::CheckpointExit(e.frame, e.phase, kind, e.failed);
      break;
    case v1::MODULE_FORWARD:
      nv::ModuleForward(name);
      break;
    case v1::MODULE_BACKWARD:
      nv::ModuleBackward(name);
      break;
    case v1::UPDATE_FORWARD:
      if (options_.update_marks) nv::UpdateForward();
      break;
    case v1::UPDATE_BACKWARD:
      if (options_.update_marks) nv::UpdateBackward();
      break;
    case v1::STASH_PUSH:
      nv::StashPush(name, e.frame);
      break;
    case v1::STASH_POP:
      nv::StashPop(name, e.frame);
      break;
    default:
      break;
  }
#else
  (void)e;
#endif
}

void StateManager::DrainLocked(ModuleCall* call) {
  std::vector<state::ModelEvent>& events = *model_->mutable_events();
  // Pops first: a module that pops from the frame being recomputed and pushes into frames opened
  // inside that recompute stashes the scales it actually uses, the popped ones.
  for (const state::ModelEvent& e : events) {
    if (e.kind != v1::STASH_POP) continue;
    std::deque<StashEntry>& d = StashFor(e.module, e.frame);
    if (d.empty()) continue;  // the model reports the missing stash
    StashEntry entry = std::move(d.front());
    d.pop_front();
    if (call != nullptr) {
      call->recompute = true;
      call->stashed = std::move(entry.scales);
      call->stashed_base = entry.base;
    }
  }
  for (const state::ModelEvent& e : events) {
    switch (e.kind) {
      case v1::UPDATE_FORWARD:
        UpdateLocked(true);
        break;
      case v1::UPDATE_BACKWARD:
        UpdateLocked(false);
        break;
      case v1::STASH_PUSH:
        if (call != nullptr && call->buffers) {
          if (call->recompute) {
            StashFor(e.module, e.frame).push_back({e.module, call->stashed, call->stashed_base});
          } else {
            StashFor(e.module, e.frame)
                .push_back({e.module, call->buffers->fwd_version, call->fwd_base});
          }
        }
        break;
      default:
        break;
    }
    EmitLocked(e);
  }
  events.clear();
  const auto& violations = model_->violations();
  for (; violations_seen_ < violations.size(); ++violations_seen_) {
    if (violations_.size() < kMaxViolationsKept) {
      violations_.push_back(violations[violations_seen_].message());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Transitions

void StateManager::AutocastEnter(bool enabled, const DelayedScaling& recipe) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  SyncGradLocked();
  autocasts_.push_back({enabled, recipe, sync_});
  marks_.push_back(sync_);
  model_->AutocastEnter(enabled, /*delayed_scaling=*/true);
  DrainLocked(nullptr);
}

void StateManager::AutocastExit(bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  if (autocasts_.empty()) {
    violations_.push_back("autocast exit without an open autocast");
    return;
  }
  PopSyncLocked(autocasts_.back().sync_mark);
  if (!marks_.empty()) marks_.pop_back();
  SyncGradLocked();  // the grad mode the autocast exits into decides the forward update
  model_->AutocastExit(failed);
  DrainLocked(nullptr);
  autocasts_.pop_back();
}

ModuleCall StateManager::ModuleForward(uint32_t module, bool training, bool requires_grad,
                                       const at::Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  SyncGradLocked();
  ModuleEntry& m = modules_.at(module);
  state::ModuleInfo info;
  info.id = module;
  info.kind = m.kind;
  info.training = training;
  info.requires_grad = requires_grad;
  ModuleCall call;
  call.module = module;
  call.ctx = model_->ModuleForward(info);
  call.fp8 = call.ctx.fp8;
  if (call.fp8) {
    const DelayedScaling recipe = *CurrentRecipeLocked(module);
    call.buffers = BuffersLocked(recipe, device);
    const auto [fwd_base, bwd_base] = SlotsLocked(*call.buffers, module);
    call.fwd_base = fwd_base;
    call.bwd_base = bwd_base;
    m.last_recipe = recipe;
    m.has_recipe = true;
  }
  DrainLocked(&call);
  if (call.ctx.raised) {
    throw std::runtime_error("fp8audit runtime (te-legacy): module " + m.name +
                             " recomputes with no stashed FP8 metadata (Transformer Engine "
                             "raises IndexError here)");
  }
  if (call.recompute) {
    // Amax of a recompute goes to a scratch buffer nobody reads (one per device, reused).
    at::Tensor* scratch = nullptr;
    for (at::Tensor& t : discard_) {
      if (t.device() == device) scratch = &t;
    }
    if (scratch == nullptr) scratch = &discard_.emplace_back();
    if (!scratch->defined() || scratch->size(0) < m.forward_tensors) {
      *scratch = at::zeros({std::max<int64_t>(8, m.forward_tensors)},
                           at::TensorOptions().dtype(at::kFloat).device(device));
    }
    call.discard = *scratch;
  }
  return call;
}

void StateManager::ModuleBackward(const state::ModuleCtx& ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  model_->ModuleBackward(ctx);
  DrainLocked(nullptr);
}

state::CheckpointEntry StateManager::CheckpointEnter(CheckpointKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  SyncGradLocked();
  FrameInfo info;
  info.kind = kind;
  info.sync_mark = sync_;
  if (!autocasts_.empty()) {
    info.fp8 = autocasts_.back().enabled;
    info.recipe = autocasts_.back().recipe;
  }
  const state::CheckpointEntry entry = model_->CheckpointEnter(kind);
  info.direct = entry.direct;
  frames_[entry.frame] = info;
  open_frames_.push_back(entry.frame);
  marks_.push_back(info.sync_mark);
  DrainLocked(nullptr);
  return entry;
}

void StateManager::CheckpointExit(uint32_t frame, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  auto it = frames_.find(frame);
  if (it != frames_.end()) {
    PopSyncLocked(it->second.sync_mark);
    // te-legacy reads a reentrant frame's FP8 state after the callable returned
    // (distributed.py:393-400); fixed keeps what it was at entry.
    if (options_.semantics == state::Semantics::kTeLegacy &&
        it->second.kind == CheckpointKind::kReentrant) {
      it->second.fp8 = !autocasts_.empty() && autocasts_.back().enabled;
      if (!autocasts_.empty()) it->second.recipe = autocasts_.back().recipe;
    }
  }
  if (!marks_.empty()) marks_.pop_back();
  model_->CheckpointExit(frame, failed);
  if (!open_frames_.empty() && open_frames_.back() == frame) open_frames_.pop_back();
  if (failed && options_.semantics == state::Semantics::kFixed) frame_stash_.erase(frame);
  DrainLocked(nullptr);
}

void StateManager::RecomputeEnter(uint32_t frame) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  RecomputeSnapshot snapshot;
  snapshot.frame = frame;
  snapshot.autocasts = autocasts_.size();
  snapshot.sync_mark = sync_;
  if (options_.semantics == state::Semantics::kFixed) {
    auto it = frame_stash_.find(frame);
    if (it != frame_stash_.end()) snapshot.stash = it->second;
  }
  const size_t seen = violations_seen_;
  if (!model_->RecomputeEnter(frame)) {
    std::string why = "it cannot start";
    const auto& violations = model_->violations();
    if (violations.size() > seen) why = violations.back().message();
    DrainLocked(nullptr);
    throw std::runtime_error("fp8audit runtime: recompute of checkpoint frame " +
                             std::to_string(frame) + " failed: " + why);
  }
  AutocastScope scope;
  auto it = frames_.find(frame);
  if (it != frames_.end()) {
    scope.enabled = it->second.fp8;
    scope.recipe = it->second.recipe;
  }
  scope.sync_mark = sync_;
  autocasts_.push_back(scope);
  marks_.push_back(sync_);
  recomputes_.push_back(std::move(snapshot));
  DrainLocked(nullptr);
}

void StateManager::RecomputeExit(uint32_t frame, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  if (recomputes_.empty() || recomputes_.back().frame != frame) {
    violations_.push_back("recompute of frame " + std::to_string(frame) +
                          " exits but is not the innermost recompute");
    return;
  }
  RecomputeSnapshot snapshot = std::move(recomputes_.back());
  recomputes_.pop_back();
  PopSyncLocked(snapshot.sync_mark);
  if (!marks_.empty()) marks_.pop_back();
  model_->RecomputeExit(frame, failed);
  autocasts_.resize(snapshot.autocasts);
  if (options_.semantics == state::Semantics::kFixed) {
    if (failed) {
      // The model rolled the frame back; so does its stash.
      frame_stash_[frame] = std::move(snapshot.stash);
    } else {
      frame_stash_.erase(frame);  // left-overs are reported by the model
    }
  }
  DrainLocked(nullptr);
}

// ---------------------------------------------------------------------------------------------
// Microbatches

void StateManager::BeginMicrobatch() {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  model_->BeginMicrobatch(microbatch_++);
#if FP8AUDIT_RUNTIME_NVTX
  if (options_.nvtx) ::fp8audit::nvtx::MicrobatchBegin();
#endif
  DrainLocked(nullptr);
}

void StateManager::EndMicrobatch() {
  std::lock_guard<std::mutex> lock(mu_);
  Timer timer(options_.measure, &bookkeeping_ns_, &bookkeeping_calls_);
  if (autocasts_.empty() && open_frames_.empty() && recomputes_.empty()) PopSyncLocked(0);
  model_->EndMicrobatch();
  if (open_frames_.empty() && recomputes_.empty()) {
    // The model forgets the microbatch's frames; so does the runtime (te-legacy's per-module
    // stashes persist, as Transformer Engine's deques do).
    frames_.clear();
    frame_stash_.clear();
  }
  DrainLocked(nullptr);
#if FP8AUDIT_RUNTIME_NVTX
  if (options_.nvtx) ::fp8audit::nvtx::MicrobatchEnd();
#endif
}

void StateManager::Step() {
#if FP8AUDIT_RUNTIME_NVTX
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.nvtx) ::fp8audit::nvtx::Step();
#endif
}

// ---------------------------------------------------------------------------------------------
// Capture targets

void StateManager::PushCapture(std::shared_ptr<NonReentrantFrame> frame, bool recompute) {
  std::lock_guard<std::mutex> lock(mu_);
  captures_.push_back({std::move(frame), recompute, 0});
}

void StateManager::PopCapture() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!captures_.empty()) captures_.pop_back();
}

CaptureTarget* StateManager::capture() {
  std::lock_guard<std::mutex> lock(mu_);
  return captures_.empty() ? nullptr : &captures_.back();
}

// ---------------------------------------------------------------------------------------------
// Fp8Autocast

Fp8Autocast::Fp8Autocast(bool enabled, const DelayedScaling& recipe)
    : uncaught_(std::uncaught_exceptions()) {
  recipe.Validate();
  StateManager::Get().AutocastEnter(enabled, recipe);
}

Fp8Autocast::~Fp8Autocast() {
  try {
    StateManager::Get().AutocastExit(std::uncaught_exceptions() > uncaught_);
  } catch (const std::exception& e) {
    std::cerr << "fp8audit runtime: error while leaving an FP8 autocast: " << e.what() << "\n";
  }
}

}  // namespace fp8audit::runtime
