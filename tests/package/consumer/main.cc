// One logical microbatch through the installed fixed runtime: an FP8 Linear under an autocast,
// forward and backward; the state manager must have made exactly one forward and one backward
// DelayedScaling update. Prints "forward F backward B" and exits 0 only for 1/1.
#include <ATen/ATen.h>

#include <cstdio>

#include "runtime/modules.h"
#include "runtime/state_manager.h"

int main() {
  using namespace fp8audit::runtime;
  StateManager::Get().Configure(RuntimeOptions{});
  Linear fc(32, 16);
  const at::Tensor x = at::randn({8, 32});
  {
    MicrobatchScope microbatch;
    at::Tensor y;
    {
      Fp8Autocast autocast;
      y = fc->forward(x);
    }
    y.sum().backward();
  }
  const auto forward = StateManager::Get().forward_updates();
  const auto backward = StateManager::Get().backward_updates();
  std::printf("forward %llu backward %llu\n", static_cast<unsigned long long>(forward),
              static_cast<unsigned long long>(backward));
  return forward == 1 && backward == 1 ? 0 : 1;
}
