// Scenario runner throughput: model events per second on one core, for a 10,000-module scenario
// (1,000 layers x 10 Linear) under each checkpoint layout and both semantics.
// Usage: state_runner_bench [microbatches]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "state/layouts.h"
#include "state/scenario_runner.h"

using namespace fp8audit::state;

int main(int argc, char** argv) {
  const uint32_t microbatches = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 20;
  std::printf("| layout (1000 layers x 10 Linear) | semantics | events/microbatch | Mevents/s |\n");
  std::printf("|---|---|---:|---:|\n");
  const std::pair<std::optional<fp8audit::CheckpointKind>, Segments> layouts[] = {
      {std::nullopt, Segments::kSingle},
      {fp8audit::CheckpointKind::kReentrant, Segments::kPerLayer},
      {fp8audit::CheckpointKind::kNonReentrant, Segments::kPerLayer},
      {fp8audit::CheckpointKind::kReentrant, Segments::kNested},
  };
  for (const auto& [mode, seg] : layouts) {
    LayoutSpec spec;
    spec.layers = 1000;
    spec.linears_per_layer = 10;
    spec.checkpoint = mode;
    spec.segments = seg;
    spec.microbatches = microbatches;
    std::string error;
    const auto sc = CompileScenario(MakeLayout(spec), &error);
    if (!sc) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    for (Semantics s : {Semantics::kFixed, Semantics::kTeLegacy}) {
      RunOptions o;
      o.semantics = s;
      RunScenario(*sc, o);  // warm-up
      double best = 0;
      uint64_t events = 0;
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        const RunOutcome r = RunScenario(*sc, o);
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        events = r.event_count;
        best = std::max(best, static_cast<double>(r.event_count) / sec);
      }
      std::printf("| %s | %s | %llu | %.1f |\n", MakeLayout(spec).name().c_str(),
                  std::string(SemanticsName(s)).c_str(),
                  static_cast<unsigned long long>(events / microbatches), best / 1e6);
    }
  }
  return 0;
}
