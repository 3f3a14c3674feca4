#include "runtime/modules.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/linear_op.h"

namespace fp8audit::runtime {
namespace {

bool SupportedDtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

void CheckOptions(const char* module, int64_t in, int64_t out, const ModuleOptions& o) {
  if (in <= 0 || out <= 0) {
    throw std::invalid_argument(std::string(module) +
                                ": arguments 'in_features' and "
                                "'out_features' must be positive, got " +
                                std::to_string(in) + " and " + std::to_string(out));
  }
  if (!SupportedDtype(o.dtype)) {
    throw std::invalid_argument(std::string(module) +
                                ": argument 'dtype' must be float32, "
                                "bfloat16 or float16, got " +
                                c10::toString(o.dtype));
  }
}

// The input against a weight [out, in]: checked before anything changes state.
void CheckInput(const char* module, const at::Tensor& input, int64_t in_features,
                const at::Tensor& weight) {
  if (!input.defined()) {
    throw std::invalid_argument(std::string(module) + ": argument 'input' is an undefined tensor");
  }
  if (!SupportedDtype(input.scalar_type())) {
    throw std::invalid_argument(std::string(module) + ": argument 'input' has unsupported dtype " +
                                c10::toString(input.scalar_type()) +
                                " (float32, bfloat16 or float16)");
  }
  if (input.scalar_type() != weight.scalar_type()) {
    throw std::invalid_argument(std::string(module) + ": argument 'input' has dtype " +
                                c10::toString(input.scalar_type()) + " but the weight has " +
                                c10::toString(weight.scalar_type()));
  }
  if (input.dim() < 1 || input.size(-1) != in_features || input.numel() == 0) {
    throw std::invalid_argument(std::string(module) + ": argument 'input' must have shape [..., " +
                                std::to_string(in_features) + "] and be non-empty, got " +
                                c10::str(input.sizes()));
  }
  if (input.device() != weight.device()) {
    throw std::invalid_argument(std::string(module) + ": argument 'input' is on " +
                                input.device().str() + " but the weight is on " +
                                weight.device().str());
  }
  // cuBLASLt's FP8 GEMMs need every dimension to be a multiple of 16: refuse before any state
  // changes rather than fail inside the GEMM.
  if (input.device().is_cuda() && StateManager::Get().fp8_enabled()) {
    const int64_t rows = input.numel() / input.size(-1);
    if (rows % 16 != 0 || input.size(-1) % 16 != 0 || weight.size(0) % 16 != 0) {
      throw std::invalid_argument(
          std::string(module) + ": argument 'input' of shape " + c10::str(input.sizes()) +
          " with " + std::to_string(weight.size(0)) +
          " output features: FP8 on CUDA needs rows, input and output features to be multiples "
          "of 16");
    }
  }
}

at::Tensor Uniform(int64_t rows, int64_t cols, int64_t fan_in, const ModuleOptions& o) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor t = cols > 0 ? at::empty({rows, cols}, opts) : at::empty({rows}, opts);
  t.uniform_(-bound, bound);
  return t.to(o.device, o.dtype);
}

bool AnyRequiresGrad(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, const ModuleOptions& options)
    : in_(in_features), out_(out_features) {
  CheckOptions("Linear", in_features, out_features, options);
  weight = register_parameter("weight", Uniform(out_features, in_features, in_features, options));
  if (options.bias) {
    bias = register_parameter("bias", Uniform(out_features, 0, in_features, options));
  }
  id_ = StateManager::Get().RegisterModule(options.name, state::ModuleKind::kLinear, 2, 1);
}

at::Tensor LinearImpl::forward(const at::Tensor& input) {
  CheckInput("Linear", input, in_, weight);
  const bool requires_grad = AnyRequiresGrad({&input, &weight, &bias});
  ModuleCall call =
      StateManager::Get().ModuleForward(id_, is_training(), requires_grad, input.device());
  return LinearOp(call, GemmSlots{0, 1, 0}, input, weight, bias);
}

// ---------------------------------------------------------------------------------------------

LayerNormLinearImpl::LayerNormLinearImpl(int64_t in_features, int64_t out_features,
                                         const ModuleOptions& options)
    : in_(in_features), out_(out_features), eps_(options.eps) {
  CheckOptions("LayerNormLinear", in_features, out_features, options);
  ln_weight = register_parameter(
      "ln_weight",
      at::ones({in_features}, at::TensorOptions().dtype(options.dtype).device(options.device)));
  ln_bias = register_parameter(
      "ln_bias",
      at::zeros({in_features}, at::TensorOptions().dtype(options.dtype).device(options.device)));
  weight = register_parameter("weight", Uniform(out_features, in_features, in_features, options));
  if (options.bias) {
    bias = register_parameter("bias", Uniform(out_features, 0, in_features, options));
  }
  id_ = StateManager::Get().RegisterModule(options.name, state::ModuleKind::kLayerNormLinear, 2, 1);
}

at::Tensor LayerNormLinearImpl::forward(const at::Tensor& input) {
  CheckInput("LayerNormLinear", input, in_, weight);
  const bool requires_grad = AnyRequiresGrad({&input, &ln_weight, &ln_bias, &weight, &bias});
  ModuleCall call =
      StateManager::Get().ModuleForward(id_, is_training(), requires_grad, input.device());
  const at::Tensor normed = at::layer_norm(input, {in_}, ln_weight, ln_bias, eps_);
  return LinearOp(call, GemmSlots{0, 1, 0}, normed, weight, bias);
}

// ---------------------------------------------------------------------------------------------

LayerNormMLPImpl::LayerNormMLPImpl(int64_t hidden_size, int64_t ffn_hidden_size,
                                   const ModuleOptions& options)
    : hidden_(hidden_size), ffn_(ffn_hidden_size), eps_(options.eps) {
  CheckOptions("LayerNormMLP", hidden_size, ffn_hidden_size, options);
  const auto opts = at::TensorOptions().dtype(options.dtype).device(options.device);
  ln_weight = register_parameter("ln_weight", at::ones({hidden_size}, opts));
  ln_bias = register_parameter("ln_bias", at::zeros({hidden_size}, opts));
  fc1_weight =
      register_parameter("fc1_weight", Uniform(ffn_hidden_size, hidden_size, hidden_size, options));
  fc2_weight = register_parameter("fc2_weight",
                                  Uniform(hidden_size, ffn_hidden_size, ffn_hidden_size, options));
  if (options.bias) {
    fc1_bias = register_parameter("fc1_bias", Uniform(ffn_hidden_size, 0, hidden_size, options));
    fc2_bias = register_parameter("fc2_bias", Uniform(hidden_size, 0, ffn_hidden_size, options));
  }
  id_ = StateManager::Get().RegisterModule(options.name, state::ModuleKind::kLayerNormMlp, 4, 2);
}

at::Tensor LayerNormMLPImpl::forward(const at::Tensor& input) {
  CheckInput("LayerNormMLP", input, hidden_, fc1_weight);
  const bool requires_grad = AnyRequiresGrad(
      {&input, &ln_weight, &ln_bias, &fc1_weight, &fc1_bias, &fc2_weight, &fc2_bias});
  ModuleCall call =
      StateManager::Get().ModuleForward(id_, is_training(), requires_grad, input.device());
  const at::Tensor normed = at::layer_norm(input, {hidden_}, ln_weight, ln_bias, eps_);
  const at::Tensor h = LinearOp(call, GemmSlots{0, 1, 0}, normed, fc1_weight, fc1_bias);
  const at::Tensor a = at::gelu(h, "tanh");
  return LinearOp(call, GemmSlots{2, 3, 1}, a, fc2_weight, fc2_bias);
}

}  // namespace fp8audit::runtime
