// runtime_bench: figures for runtime/README.md.
//   --mode gemm:        FP8 Linear forward+backward (runtime, CUDA backend, cuBLASLt) vs BF16
//                       torch::nn::Linear forward+backward at M=N=K=--size, side by side in one
//                       run (GPU only).
//   --mode bookkeeping: the decoder-like stack (--layers x 7 modules, reentrant checkpoint per
//                       layer, fixed ownership): step time and the share spent in the state
//                       manager (ownership decisions, stash, updates, NVTX), on cpu or cuda.
//                       Both come from the same timed microbatches of one run (see kMethod).
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "runtime/backend.h"
#include "runtime/modules.h"
#include "runtime/repro/repro.h"
#include "runtime/state_manager.h"

namespace {

using namespace fp8audit::runtime;
using Clock = std::chrono::steady_clock;

constexpr char kMethod[] =
    "Bookkeeping method: one process builds the stack once and trains it for --warmup "
    "microbatches (one optimizer step per --microbatches), then for --microbatches timed ones "
    "with the same model and state manager. Step time: wall clock from the first timed "
    "microbatch's start to the last one's end (device synchronised at both ends; forward, "
    "backward with recompute, loss read-back and the optimizer step; no model construction, "
    "snapshots or checks). Bookkeeping: the time spent inside the state manager's transitions "
    "(autocast, module forward/backward, checkpoint and recompute enter/exit, microbatch "
    "begin/end), each timed with steady_clock while the manager's lock is held, summed over the "
    "same timed microbatches: ownership decisions, stash, DelayedScaling update launches (on cpu "
    "the update itself) and NVTX marks. Host time; share = bookkeeping / step time.";

template <typename F>
double BestSeconds(int iters, bool cuda, F&& step) {
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    if (cuda) torch::cuda::synchronize();
    const auto t0 = Clock::now();
    step();
    if (cuda) torch::cuda::synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

int Gemm(int64_t size, int iters) {
  if (!backend::cuda_built() || !torch::cuda::is_available()) {
    std::fprintf(stderr, "runtime_bench --mode gemm needs a GPU and the CUDA backend\n");
    return 1;
  }
  StateManager::Get().Configure(RuntimeOptions());
  const auto dev = at::Device(at::kCUDA, 0);
  const auto opts = at::TensorOptions().device(dev).dtype(at::kBFloat16);
  ModuleOptions mo;
  mo.bias = false;
  mo.dtype = at::kBFloat16;
  mo.device = dev;
  Linear fp8(size, size, mo);
  torch::nn::Linear bf16(torch::nn::LinearOptions(size, size).bias(false));
  bf16->to(dev, at::kBFloat16);
  const at::Tensor x = at::randn({size, size}, opts).requires_grad_();
  const at::Tensor dy = at::randn({size, size}, opts);
  auto run_fp8 = [&] {
    MicrobatchScope mb;
    at::Tensor y;
    {
      Fp8Autocast autocast;
      y = fp8->forward(x);
    }
    y.backward(dy);
  };
  auto run_bf16 = [&] { bf16->forward(x).backward(dy); };
  for (int i = 0; i < 3; ++i) {
    run_fp8();
    run_bf16();
  }
  const double t_fp8 = BestSeconds(iters, true, run_fp8);
  const double t_bf16 = BestSeconds(iters, true, run_bf16);
  const double flops = 3.0 * 2.0 * static_cast<double>(size) * size * size;
  std::printf("Linear forward+backward, M=N=K=%lld (best of %d)\n", static_cast<long long>(size),
              iters);
  std::printf("  %-36s %9.3f ms  %8.1f TFLOP/s\n", "BF16 torch::nn::Linear", t_bf16 * 1e3,
              flops / t_bf16 * 1e-12);
  std::printf("  %-36s %9.3f ms  %8.1f TFLOP/s\n", "FP8 fp8audit::runtime::Linear", t_fp8 * 1e3,
              flops / t_fp8 * 1e-12);
  std::printf("  speed-up FP8 / BF16: %.2fx (target >= 1.5x)\n", t_bf16 / t_fp8);
  return 0;
}

int Bookkeeping(bool cuda, uint32_t layers, int64_t hidden, int64_t tokens, uint32_t microbatches,
                uint32_t warmup) {
  if (cuda && (!backend::cuda_built() || !torch::cuda::is_available())) {
    std::fprintf(stderr, "runtime_bench --device cuda needs a GPU and the CUDA backend\n");
    return 1;
  }
  repro::ReproOptions o;
  o.layout = repro::Layout::kReentrantPerLayer;
  o.decoder_layers = layers;
  o.hidden = hidden;
  o.tokens = tokens;
  o.microbatches = microbatches;
  o.accumulation = microbatches;
  o.cuda = cuda;
  o.measure = true;
  o.warmup = warmup;
  o.checks = false;
  const repro::ReproResult r = repro::Run(o);
  if (!r.error.empty()) {
    std::fprintf(stderr, "runtime_bench: %s\n", r.error.c_str());
    return 1;
  }
  const double share = static_cast<double>(r.bookkeeping_ns) * 1e-9 / r.seconds;
  std::printf(
      "decoder-like stack %ux7 modules, H=%lld, tokens=%lld, reentrant per layer, fixed, %s; "
      "%u timed microbatches after %u warm-up\n",
      layers, static_cast<long long>(hidden), static_cast<long long>(tokens), cuda ? "cuda" : "cpu",
      microbatches, warmup);
  std::printf(
      "  step time per microbatch %.3f ms, bookkeeping %.3f ms = %.3f%% (target <= 1%%); "
      "%llu transitions/microbatch, %.2f us each; updates/microbatch %llu/%llu\n",
      r.seconds * 1e3 / microbatches, static_cast<double>(r.bookkeeping_ns) * 1e-6 / microbatches,
      share * 100.0, static_cast<unsigned long long>(r.bookkeeping_calls / microbatches),
      r.bookkeeping_calls ? static_cast<double>(r.bookkeeping_ns) * 1e-3 / r.bookkeeping_calls
                          : 0.0,
      static_cast<unsigned long long>(r.forward_updates.back()),
      static_cast<unsigned long long>(r.backward_updates.back()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"runtime_bench: FP8 Linear vs BF16, and bookkeeping share of step time"};
  app.footer(kMethod);
  std::string mode = "all", device = "cpu";
  int64_t size = 8192, hidden = 256, tokens = 256;
  uint32_t layers = 4, microbatches = 4;
  std::optional<uint32_t> warmup;
  int iters = 10;
  app.add_option("--mode", mode, "gemm|bookkeeping|all (default all)")
      ->check(CLI::IsMember({"gemm", "bookkeeping", "all"}));
  app.add_option("--device", device, "cpu|cuda, for bookkeeping (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--size", size, "M=N=K of the GEMM benchmark (default 8192)");
  app.add_option("--iters", iters, "timed iterations, best taken (default 10)");
  app.add_option("--layers", layers, "decoder layers (default 4)");
  app.add_option("--hidden", hidden, "decoder hidden size (default 256)");
  app.add_option("--tokens", tokens, "rows per microbatch (default 256)");
  app.add_option("--microbatches", microbatches,
                 "timed microbatches, one optimizer step (default 4)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed microbatches first (default --microbatches)");
  CLI11_PARSE(app, argc, argv);
  int rc = 0;
  if (mode == "gemm" || (mode == "all" && device == "cuda")) rc |= Gemm(size, iters);
  if (mode == "bookkeeping" || mode == "all") {
    rc |= Bookkeeping(device == "cuda", layers, hidden, tokens, microbatches,
                      warmup.value_or(microbatches));
  }
  return rc;
}
