// Host time the te-call probe adds to one Transformer Engine update call, in one process (CPU
// only): a libtransformer_engine.so exporting the update entry point with TE's signature (the
// stand-in tests/agent/fake_te builds) is loaded RTLD_GLOBAL, as TE's Python package loads it; the
// program then calls the entry point through the global scope (the preloaded agent's definition,
// which records the call and hands it on) and directly (the library's own, found with dlsym on its
// handle), in alternating batches, with 8-tensor vectors built per call as TE's extension does.
// With the agent preloaded it also times batches with the probe's recording turned off
// (fp8audit_set_launch_probe(0)). Prints one JSON line of medians over batches, ns per call.
//
// usage: agent_te_call_bench LIBTRANSFORMER_ENGINE [BATCHES [CALLS_PER_BATCH]]
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using Update = void (*)(void*, std::vector<void*>, std::vector<void*>, const char*, int, float,
                        void*);
constexpr char kName[] = "nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction";

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Batch(Update fn, int calls, const std::vector<void*>& tensors) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    fn(nullptr, std::vector<void*>(tensors.begin(), tensors.end()),
       std::vector<void*>(tensors.begin(), tensors.end()), "max", 7, 0.0f, nullptr);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIBTRANSFORMER_ENGINE [BATCHES [CALLS]]\n", argv[0]);
    return 2;
  }
  const int batches = argc > 2 ? std::atoi(argv[2]) : 300;
  const int calls = argc > 3 ? std::atoi(argv[3]) : 200;
  void* te = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (te == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  const auto direct = reinterpret_cast<Update>(dlsym(te, kName));
  const auto global = reinterpret_cast<Update>(dlsym(RTLD_DEFAULT, kName));
  const auto toggle =
      reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "fp8audit_set_launch_probe"));
  if (direct == nullptr || global == nullptr) return 2;
  const bool interposed = global != direct;
  const std::vector<void*> tensors(8, nullptr);
  for (int i = 0; i < 3; ++i) Batch(global, calls, tensors), Batch(direct, calls, tensors);
  std::vector<double> direct_ns, global_ns, off_ns;
  for (int b = 0; b < batches; ++b) {
    const int phase = b % (toggle != nullptr ? 3 : 2);
    if (phase == 0) direct_ns.push_back(Batch(direct, calls, tensors));
    if (phase == 1) global_ns.push_back(Batch(global, calls, tensors));
    if (phase == 2) {
      toggle(0);
      off_ns.push_back(Batch(global, calls, tensors));
      toggle(1);
    }
    // Let the agent's writer drain what the batch recorded (a job makes a few calls per
    // microbatch, not thousands back to back).
    timespec pause{0, 2'000'000};
    nanosleep(&pause, nullptr);
  }
  std::printf(
      "{\"interposed\": %s, \"direct_ns\": %.1f, \"through_agent_ns\": %.1f, "
      "\"added_ns\": %.1f",
      interposed ? "true" : "false", Median(direct_ns), Median(global_ns),
      Median(global_ns) - Median(direct_ns));
  if (!off_ns.empty()) {
    std::printf(", \"recording_off_ns\": %.1f, \"added_recording_off_ns\": %.1f", Median(off_ns),
                Median(off_ns) - Median(direct_ns));
  }
  std::printf(", \"calls\": %d}\n", batches * calls);
  return 0;
}
