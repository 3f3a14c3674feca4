// A stand-in for Transformer Engine's PyTorch extension: it links the core library and calls the
// update entry points the way csrc/extensions/recipe.cpp does (fresh vectors by value, the current
// stream), from the training thread and from a thread named like PyTorch's autograd threads, and
// checks that the core library received exactly what it passed.
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "tests/agent/fake_te/fake_te_api.h"

namespace {

int g_failures = 0;

NVTETensor T(uintptr_t v) { return reinterpret_cast<NVTETensor>(v); }

void Check(bool ok, const char* what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "fake_ext: the core library received a different %s\n", what);
}

// One fused update of `n` tensors.
void Bulk(size_t n, NVTEDType dtype, const char* algo = "max") {
  std::vector<NVTETensor> histories, scales;
  for (size_t i = 0; i < n; ++i) {
    histories.push_back(T(0x1000 + i));
    scales.push_back(T(0x2000 + i));
  }
  const int before = fake_te_calls();
  nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction(
      T(0xb0f), std::vector<NVTETensor>(histories.begin(), histories.end()),
      std::vector<NVTETensor>(scales.begin(), scales.end()), algo, dtype, 0.5f,
      reinterpret_cast<cudaStream_t>(0x5eed));
  const FakeTeCall* c = fake_te_last_call();
  Check(fake_te_calls() == before + 1 && c->entry == 1, "call");
  Check(c->first == T(0xb0f), "reduction buffer");
  Check(c->histories == histories, "amax histories");
  Check(c->scales == scales, "scales");
  Check(c->algo == algo, "algorithm");
  Check(c->dtype == dtype, "dtype");
  Check(c->margin == 0.5f, "margin");
  Check(c->stream == reinterpret_cast<cudaStream_t>(0x5eed), "stream");
}

void Single(NVTEDType dtype) {
  nvte_delayed_scaling_recipe_amax_and_scale_update(T(0xa1), T(0xa2), T(0xa3), T(0xa4),
                                                    "most_recent", dtype, 2.0f,
                                                    reinterpret_cast<cudaStream_t>(0x77));
  const FakeTeCall* c = fake_te_last_call();
  Check(c->entry == 0 && c->first == T(0xa1), "amax history");
  Check(c->scales == std::vector<NVTETensor>{T(0xa2), T(0xa4)}, "scales");
  Check(c->histories == std::vector<NVTETensor>{T(0xa3)}, "updated history");
  Check(std::strcmp(c->algo, "most_recent") == 0 && c->dtype == dtype && c->margin == 2.0f,
        "arguments");
  Check(c->stream == reinterpret_cast<cudaStream_t>(0x77), "stream");
}

}  // namespace

// "sequence": the training thread's forward update (E4M3, 3 tensors); on an autograd thread a
// backward update (E5M2, 5), a recompute's forward update (E4M3, 2), a single-tensor backward
// update (E5M2) and one of an unknown dtype with no tensors; back on the training thread a forward
// update. "throw": a call that throws, caught here, then one forward update. "hooked": the Python
// hook's NVTX ranges (as torch.cuda.nvtx sends them) around a fused call announcing 1 update,
// around a fused call announcing 2 of which 1 unfused, and around no call announcing 1 unfused
// update. "one": one forward update (E4M3) on the calling thread and one backward update (E5M2)
// on an autograd-named thread, a logical microbatch as TE makes it. Returns the failed checks.
extern "C" __attribute__((visibility("default"))) int fake_ext_run(const char* mode) {
  if (std::strcmp(mode, "hooked") == 0) {
    nvtxRangePushA("fp8audit.te.update pass=forward count=1 unfused=0");
    Bulk(3, kNVTEFloat8E4M3);
    nvtxRangePop();
    nvtxRangePushA("fp8audit.te.update pass=forward count=2 unfused=1");
    Bulk(2, kNVTEFloat8E4M3);
    nvtxRangePop();
    nvtxRangePushA("fp8audit.te.update pass=forward count=1 unfused=1");
    nvtxRangePop();
    return g_failures;
  }
  if (std::strcmp(mode, "one") == 0) {
    Bulk(1, kNVTEFloat8E4M3);
    std::thread autograd([] {
      pthread_setname_np(pthread_self(), "pt_autograd_0");
      Bulk(1, kNVTEFloat8E5M2);
    });
    autograd.join();
    return g_failures;
  }
  if (std::strcmp(mode, "throw") == 0) {
    try {
      Bulk(2, kNVTEFloat8E4M3, "throw");
      std::fprintf(stderr, "fake_ext: no exception\n");
      ++g_failures;
    } catch (const std::runtime_error& e) {
      std::printf("caught: %s\n", e.what());
    }
    Bulk(1, kNVTEFloat8E4M3);
    return g_failures;
  }
  Bulk(3, kNVTEFloat8E4M3);
  std::thread autograd([] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    Bulk(5, kNVTEFloat8E5M2);
    Bulk(2, kNVTEFloat8E4M3);
    Single(kNVTEFloat8E5M2);
    Bulk(0, kNVTEFloat32);
  });
  autograd.join();
  Bulk(1, kNVTEFloat8E4M3);
  std::printf("calls=%d\n", fake_te_calls());
  return g_failures;
}
