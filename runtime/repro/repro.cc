#include "runtime/repro/repro.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>

#include "runtime/checkpoint.h"
#include "runtime/modules.h"
#include "runtime/state_manager.h"

namespace fp8audit::runtime::repro {
namespace {

using Fn = std::function<at::Tensor(const at::Tensor&)>;

struct Model {
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::vector<Fn> layers;
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> p;
    for (const auto& m : modules) {
      for (const auto& t : m->parameters()) p.push_back(t);
    }
    return p;
  }
};

ModuleOptions Opts(const std::string& name, const ReproOptions& o) {
  ModuleOptions m;
  m.name = name;
  m.dtype = o.cuda ? at::kBFloat16 : at::kFloat;
  m.device = o.cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  return m;
}

Model Build(const ReproOptions& o) {
  Model model;
  const int64_t h = o.hidden;
  if (o.decoder_layers == 0) {
    for (int i = 1; i <= 3; ++i) {
      auto fc = std::make_shared<LinearImpl>(h, h, Opts("fc" + std::to_string(i), o));
      model.modules.push_back(fc);
      model.layers.push_back([fc](const at::Tensor& x) { return fc->forward(x); });
    }
    return model;
  }
  for (uint32_t l = 0; l < o.decoder_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    auto qkv = std::make_shared<LayerNormLinearImpl>(h, h, Opts(p + "qkv", o));
    auto attn1 = std::make_shared<LinearImpl>(h, h, Opts(p + "attn_in", o));
    auto attn2 = std::make_shared<LinearImpl>(h, h, Opts(p + "attn_mix", o));
    auto proj = std::make_shared<LinearImpl>(h, h, Opts(p + "proj", o));
    auto mlp = std::make_shared<LayerNormMLPImpl>(h, 2 * h, Opts(p + "mlp", o));
    auto up = std::make_shared<LayerNormLinearImpl>(h, 2 * h, Opts(p + "up", o));
    auto down = std::make_shared<LinearImpl>(2 * h, h, Opts(p + "down", o));
    for (std::shared_ptr<torch::nn::Module> m :
         std::initializer_list<std::shared_ptr<torch::nn::Module>>{qkv, attn1, attn2, proj, mlp, up,
                                                                   down}) {
      model.modules.push_back(m);
    }
    model.layers.push_back([=](const at::Tensor& x0) {
      at::Tensor a = attn2->forward(attn1->forward(qkv->forward(x0)));
      at::Tensor x = x0 + proj->forward(a);
      x = x + mlp->forward(x);
      return x + down->forward(at::gelu(up->forward(x), "tanh"));
    });
  }
  return model;
}

at::Tensor Stack(const Model& m, const at::Tensor& x0, size_t from) {
  at::Tensor x = x0;
  for (size_t i = from; i < m.layers.size(); ++i) x = m.layers[i](x);
  return x;
}

// A callable run as one checkpoint segment, with the autocast inside it when asked.
Fn Region(const ReproOptions& o, Fn fn) {
  if (!o.inner_autocast) return fn;
  return [o, fn](const at::Tensor& x) {
    Fp8Autocast autocast(true, o.recipe);
    return fn(x);
  };
}

at::Tensor Forward(const ReproOptions& o, const Model& m, const at::Tensor& x) {
  const auto whole = [&m](const at::Tensor& t) { return Stack(m, t, 0); };
  switch (o.layout) {
    case Layout::kNone:
      return Region(o, whole)(x);
    case Layout::kReentrantSingle:
    case Layout::kNonReentrantSingle:
      return checkpoint(Region(o, whole), x, *CheckpointKindOf(o.layout));
    case Layout::kReentrantPerLayer:
    case Layout::kNonReentrantPerLayer: {
      at::Tensor h = x;
      for (const Fn& layer : m.layers) {
        h = checkpoint(Region(o, layer), h, *CheckpointKindOf(o.layout));
      }
      return h;
    }
    case Layout::kNested:
      return checkpoint(Region(o,
                               [&m](const at::Tensor& t) {
                                 const at::Tensor first =
                                     checkpoint(m.layers[0], t, CheckpointKind::kReentrant);
                                 return Stack(m, first, 1);
                               }),
                        x, CheckpointKind::kReentrant);
  }
  throw std::logic_error("unknown layout");
}

bool Finite(const at::Tensor& t) { return at::isfinite(t.to(at::kFloat)).all().item<bool>(); }
bool Nonzero(const at::Tensor& t) { return t.ne(0).any().item<bool>(); }
at::Tensor Snapshot(const at::Tensor& t) { return t.detach().to(at::kCPU).clone(); }

// min(1, max_norm / (global gradient norm + 1e-6)) as a float scalar on the device (no host
// synchronisation); 1 when max_norm is 0.
at::Tensor ClipCoefficient(const std::vector<at::Tensor>& params, float max_norm,
                           const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  if (max_norm <= 0) return at::ones({}, opts);
  at::Tensor squares = at::zeros({}, opts);
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) squares = squares + p.grad().to(at::kFloat).pow(2).sum();
  }
  return (max_norm / (squares.sqrt() + 1e-6)).clamp_max(1.0);
}

void SetTraining(Model& m, bool training) {
  for (auto& mod : m.modules) mod->train(training);
}

}  // namespace

std::optional<Layout> ParseLayout(std::string_view name) {
  for (Layout l : AllLayouts()) {
    if (LayoutName(l) == name) return l;
  }
  return std::nullopt;
}

std::string LayoutName(Layout layout) {
  const std::optional<CheckpointKind> kind = CheckpointKindOf(layout);
  if (!kind) return "none";
  if (layout == Layout::kNested) return "nested";
  const bool single = layout == Layout::kReentrantSingle || layout == Layout::kNonReentrantSingle;
  return std::string(CheckpointKindName(*kind)) + (single ? "-single" : "-per-layer");
}

std::optional<CheckpointKind> CheckpointKindOf(Layout layout) {
  switch (layout) {
    case Layout::kNone:
      return std::nullopt;
    case Layout::kReentrantSingle:
    case Layout::kReentrantPerLayer:
    case Layout::kNested:
      return CheckpointKind::kReentrant;
    case Layout::kNonReentrantSingle:
    case Layout::kNonReentrantPerLayer:
      return CheckpointKind::kNonReentrant;
  }
  return std::nullopt;
}

std::vector<Layout> AllLayouts() {
  return {Layout::kNone,
          Layout::kReentrantSingle,
          Layout::kReentrantPerLayer,
          Layout::kNonReentrantSingle,
          Layout::kNonReentrantPerLayer,
          Layout::kNested};
}

bool ReproResult::ones_everywhere() const {
  if (!error.empty() || forward_updates.empty()) return false;
  for (size_t i = 0; i < forward_updates.size(); ++i) {
    if (forward_updates[i] != 1 || backward_updates[i] != 1) return false;
  }
  return true;
}

ReproResult Run(const ReproOptions& o) {
  ReproResult r;
  StateManager& mgr = StateManager::Get();
  RuntimeOptions ro;
  ro.semantics = o.semantics;
  ro.nvtx = o.nvtx;
  ro.measure = o.measure;
  mgr.Configure(ro);
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  uint64_t ns0 = 0;
  uint64_t calls0 = 0;
  try {
    torch::manual_seed(o.seed);
    Model model = Build(o);
    const std::vector<at::Tensor> params = model.parameters();
    SetTraining(model, !o.eval_modules);
    const auto dtype = o.cuda ? at::kBFloat16 : at::kFloat;
    const auto device = o.cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    const uint32_t accumulation = std::max<uint32_t>(1, o.accumulation);
    const uint32_t total = o.warmup + o.microbatches;
    for (uint32_t mb = 0; mb < total; ++mb) {
      if (mb == o.warmup) {
        if (o.cuda) torch::cuda::synchronize();
        start = Clock::now();
        ns0 = mgr.bookkeeping_ns();
        calls0 = mgr.bookkeeping_calls();
      }
      at::Tensor x =
          at::randn({o.tokens, o.hidden}, at::TensorOptions().dtype(at::kFloat)).to(device, dtype);
      x.requires_grad_(true);
      const uint64_t f0 = mgr.forward_updates();
      const uint64_t b0 = mgr.backward_updates();
      {
        MicrobatchScope microbatch;
        if (o.no_grad_forward) {
          at::NoGradGuard no_grad;
          std::unique_ptr<Fp8Autocast> autocast;
          if (!o.inner_autocast) autocast = std::make_unique<Fp8Autocast>(true, o.recipe);
          (void)Forward(o, model, x);
        }
        at::Tensor y;
        {
          std::unique_ptr<Fp8Autocast> autocast;
          if (!o.inner_autocast) autocast = std::make_unique<Fp8Autocast>(true, o.recipe);
          y = Forward(o, model, x);
        }
        // Normalised: the mean square, whatever H and tokens are.
        const at::Tensor loss = y.to(at::kFloat).pow(2).mean();
        if (o.switch_mode) SetTraining(model, o.eval_modules);
        loss.backward();
        if (o.switch_mode) SetTraining(model, !o.eval_modules);
        const float l = loss.item<float>();
        r.losses.push_back(l);
        if (o.checks) {
          r.finite = r.finite && std::isfinite(l) && Finite(x.grad());
          r.nonzero = r.nonzero && Nonzero(x.grad());
          r.outputs.push_back(Snapshot(y));
          r.input_grads.push_back(Snapshot(x.grad()));
        }
      }
      r.forward_updates.push_back(mgr.forward_updates() - f0);
      r.backward_updates.push_back(mgr.backward_updates() - b0);
      if ((mb + 1) % accumulation == 0 || mb + 1 == total) {
        at::NoGradGuard no_grad;
        const at::Tensor step = o.lr * ClipCoefficient(params, o.max_grad_norm, device);
        for (const at::Tensor& p : params) {
          const at::Tensor g = p.grad();
          if (!g.defined()) {
            r.nonzero = false;
            continue;
          }
          if (o.checks) {
            r.finite = r.finite && Finite(g);
            r.nonzero = r.nonzero && Nonzero(g);
            r.step_grads.push_back(Snapshot(g));
          }
          p.sub_(g * step);
          p.mutable_grad().zero_();
        }
        mgr.Step();
      }
    }
    if (o.cuda) torch::cuda::synchronize();
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (o.checks) {
      for (const at::Tensor& p : params) r.final_params.push_back(Snapshot(p));
    }
  } catch (const c10::Error& e) {
    r.error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  if (r.seconds == 0) r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.violations = mgr.TakeViolations();
  r.stash_left = mgr.stash_entries();
  r.bookkeeping_ns = mgr.bookkeeping_ns() - ns0;
  r.bookkeeping_calls = mgr.bookkeeping_calls() - calls0;
  return r;
}

bool BitwiseEqual(const ReproResult& a, const ReproResult& b, std::string* what) {
  auto same = [](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& y) -> long {
    if (x.size() != y.size()) return 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].sizes() != y[i].sizes() || x[i].scalar_type() != y[i].scalar_type()) {
        return static_cast<long>(i);
      }
      const at::Tensor xb = x[i].contiguous();
      const at::Tensor yb = y[i].contiguous();
      if (std::memcmp(xb.data_ptr(), yb.data_ptr(), xb.nbytes()) != 0) return static_cast<long>(i);
    }
    return -1;
  };
  const std::pair<const char*,
                  std::pair<const std::vector<at::Tensor>*, const std::vector<at::Tensor>*>>
      parts[] = {{"output of microbatch", {&a.outputs, &b.outputs}},
                 {"input gradient of microbatch", {&a.input_grads, &b.input_grads}},
                 {"parameter gradient (step-major) #", {&a.step_grads, &b.step_grads}},
                 {"final parameter #", {&a.final_params, &b.final_params}}};
  for (const auto& [name, pair] : parts) {
    if (pair.first->size() != pair.second->size()) {
      if (what) *what = std::string(name) + ": counts differ";
      return false;
    }
    const long i = same(*pair.first, *pair.second);
    if (i >= 0) {
      if (what) *what = std::string(name) + " " + std::to_string(i);
      return false;
    }
  }
  return true;
}

}  // namespace fp8audit::runtime::repro
