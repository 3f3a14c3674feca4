// FP8 modules (torch::nn::Module): Linear, LayerNormLinear and LayerNormMLP. Inside an enabled
// Fp8Autocast they run their GEMMs in FP8 (forward E4M3; gradients E5M2 under HYBRID) with
// DelayedScaling state held by the StateManager; elsewhere in the input's precision. Arguments are
// checked before any state changes: a mismatched shape, an unsupported dtype or a device mismatch
// throws std::invalid_argument naming the argument.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>

#include "runtime/state_manager.h"

namespace fp8audit::runtime {

struct ModuleOptions {
  bool bias = true;
  std::string name;  // in NVTX events and reports; default "<kind><id>"
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::Device(at::kCPU);
  double eps = 1e-5;  // LayerNorm
};

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, const ModuleOptions& options = {});
  at::Tensor forward(const at::Tensor& input);
  uint32_t module_id() const { return id_; }

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined

 private:
  int64_t in_, out_;
  uint32_t id_;
};
TORCH_MODULE(Linear);

class LayerNormLinearImpl : public torch::nn::Module {
 public:
  LayerNormLinearImpl(int64_t in_features, int64_t out_features, const ModuleOptions& options = {});
  at::Tensor forward(const at::Tensor& input);
  uint32_t module_id() const { return id_; }

  at::Tensor ln_weight, ln_bias;  // [in]
  at::Tensor weight;              // [out, in]
  at::Tensor bias;                // [out] or undefined

 private:
  int64_t in_, out_;
  double eps_;
  uint32_t id_;
};
TORCH_MODULE(LayerNormLinear);

// LayerNorm -> fc1 -> GELU (tanh approximation) -> fc2, one module for ownership.
class LayerNormMLPImpl : public torch::nn::Module {
 public:
  LayerNormMLPImpl(int64_t hidden_size, int64_t ffn_hidden_size, const ModuleOptions& options = {});
  at::Tensor forward(const at::Tensor& input);
  uint32_t module_id() const { return id_; }

  at::Tensor ln_weight, ln_bias;    // [hidden]
  at::Tensor fc1_weight, fc1_bias;  // [ffn, hidden], [ffn]
  at::Tensor fc2_weight, fc2_bias;  // [hidden, ffn], [hidden]

 private:
  int64_t hidden_, ffn_;
  double eps_;
  uint32_t id_;
};
TORCH_MODULE(LayerNormMLP);

}  // namespace fp8audit::runtime
