// fp8-repro: the seeds' minimal reproduction of duplicate FP8 DelayedScaling state updates under
// activation checkpointing, on the fp8audit runtime. Three sequential Linear modules (or, with
// --decoder-layers L, a decoder-like stack of L x 7 Linear-type modules), DelayedScaling HYBRID,
// every checkpoint layout of the seeds, several seeds and microbatches with gradient
// accumulation. Each logical microbatch is the NVTX range fp8audit.microbatch and each optimizer
// step the mark fp8audit.step, so `fp8audit run -- fp8-repro ...` audits it. Training: loss =
// mean(y^2), plain SGD (lr 0.05) with the global gradient norm clipped to 1, which keeps every
// model size finite (runtime/README.md).
//
// Exit codes: 0 the runs completed (with --semantics fixed: and every microbatch had 1 forward and
// 1 backward update, finite nonzero gradients and numerics bitwise identical to the run without
// checkpointing); 1 a run failed or a fixed-ownership expectation did not hold; 2 bad flags.
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/repro/repro.h"

namespace {

namespace repro = fp8audit::runtime::repro;
namespace runtime = fp8audit::runtime;
using fp8audit::state::Semantics;

std::string Counts(const repro::ReproResult& r) {
  std::ostringstream s;
  for (size_t i = 0; i < r.forward_updates.size(); ++i) {
    s << (i ? " " : "") << r.forward_updates[i] << "/" << r.backward_updates[i];
  }
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fp8-repro: duplicate FP8 DelayedScaling state updates under activation "
      "checkpointing, on the fp8audit runtime"};
  std::string layout = "all";
  std::string semantics{fp8audit::state::SemanticsName(Semantics::kFixed)};
  uint32_t seeds = 3;
  uint32_t microbatches = 4;
  uint32_t accumulation = 2;
  uint32_t decoder_layers = 0;
  std::string device = "cpu";
  int64_t hidden = 64;
  int64_t tokens = 32;
  std::string format{fp8audit::Fp8FormatName(fp8audit::Fp8Format::kHybrid)};
  bool no_compare = false;
  std::vector<std::string> layout_names;
  for (repro::Layout l : repro::AllLayouts()) layout_names.push_back(repro::LayoutName(l));
  layout_names.push_back("all");
  std::string layout_help;
  for (const std::string& name : layout_names)
    layout_help += (layout_help.empty() ? "" : "|") + name;
  app.add_option("--layout", layout, layout_help + " (default all)")
      ->check(CLI::IsMember(layout_names));
  // --ownership: this option's earlier name, still read (existing job scripts).
  app.add_option("--semantics,--ownership", semantics,
                 "ownership semantics, of those the runtime implements: " +
                     runtime::RuntimeSemanticsNames() + " (default fixed)")
      ->check(CLI::Validator(
          [](std::string& name) {
            std::string error;
            return runtime::ParseRuntimeSemantics(name, &error) ? std::string() : error;
          },
          "SEMANTICS"));
  app.add_option("--seeds", seeds, "seeds 0..N-1 (default 3)")->check(CLI::Range(1u, 1000u));
  app.add_option("--microbatches", microbatches, "logical microbatches per run (default 4)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--accumulation", accumulation,
                 "microbatches per optimizer step (gradient accumulation; default 2)")
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--decoder-layers", decoder_layers,
                 "L: a decoder-like stack of L x 7 Linear-type modules instead of three Linear "
                 "(default 0)")
      ->check(CLI::Range(0u, 1000u));
  app.add_option("--device", device, "cpu|cuda (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--hidden", hidden, "hidden size H (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("--tokens", tokens, "rows per microbatch (default 32)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  const std::vector<std::string> formats{
      std::string(fp8audit::Fp8FormatName(fp8audit::Fp8Format::kHybrid)),
      std::string(fp8audit::Fp8FormatName(fp8audit::Fp8Format::kE4M3))};
  app.add_option("--format", format,
                 formats[0] + "|" + formats[1] + " (default " + formats[0] + ")")
      ->check(CLI::IsMember(formats));
  app.add_flag("--no-compare", no_compare,
               "skip the silent reference run without checkpointing (no bitwise comparison)");
  app.footer(
      "Training: loss = mean(y^2) per microbatch; one SGD step (lr 0.05, global gradient norm "
      "clipped to 1) every --accumulation microbatches.\nExit codes: 0 the runs completed (fixed: "
      "1/1 everywhere, finite nonzero gradients, identical numerics); 1 a run failed or a fixed "
      "expectation did not hold; 2 bad flags.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return e.get_exit_code() == 0 ? code : 2;
  }
  if (device == "cuda" && !fp8audit::runtime::backend::cuda_built()) {
    std::cerr << "fp8-repro: --device cuda: CUDA backend not built\n";
    return 1;
  }
  if (device == "cuda" && !torch::cuda::is_available()) {
    std::cerr << "fp8-repro: --device cuda: no CUDA device, or libtorch without CUDA\n";
    return 1;
  }

  repro::ReproOptions base;
  base.semantics = *runtime::ParseRuntimeSemantics(semantics);
  base.microbatches = microbatches;
  base.accumulation = accumulation;
  base.decoder_layers = decoder_layers;
  base.hidden = hidden;
  base.tokens = tokens;
  base.cuda = device == "cuda";
  base.recipe.format = *fp8audit::ParseFp8Format(format);
  std::vector<repro::Layout> layouts =
      layout == "all" ? repro::AllLayouts()
                      : std::vector<repro::Layout>{*repro::ParseLayout(layout)};
  const bool fixed = base.semantics == Semantics::kFixed;

  std::printf(
      "fp8-repro: semantics=%s model=%s H=%lld tokens=%lld seeds=%u microbatches=%u "
      "accumulation=%u device=%s recipe=%s\n",
      std::string(fp8audit::state::SemanticsName(base.semantics)).c_str(),
      decoder_layers ? ("decoder " + std::to_string(decoder_layers) + "x7").c_str() : "3 x Linear",
      static_cast<long long>(hidden), static_cast<long long>(tokens), seeds, microbatches,
      accumulation, device.c_str(), base.recipe.ToString().c_str());
  bool ok = true;
  for (uint32_t seed = 0; seed < seeds; ++seed) {
    repro::ReproResult reference;
    if (!no_compare) {
      repro::ReproOptions ref = base;
      ref.seed = seed;
      ref.layout = repro::Layout::kNone;
      ref.semantics = Semantics::kFixed;
      ref.nvtx = false;  // silent: not part of the audited trace
      reference = repro::Run(ref);
    }
    for (repro::Layout l : layouts) {
      repro::ReproOptions o = base;
      o.seed = seed;
      o.layout = l;
      const repro::ReproResult r = repro::Run(o);
      std::string numerics = "not compared";
      bool identical = true;
      if (!no_compare && reference.error.empty() && r.error.empty()) {
        std::string what;
        identical = repro::BitwiseEqual(reference, r, &what);
        numerics = identical ? "bitwise identical to no checkpoint"
                             : "differ from no checkpoint (first: " + what + ")";
      }
      std::printf(
          "%-24s seed=%u updates/microbatch (fwd/bwd): %s | loss %s, grads %s%s | %s%s\n",
          repro::LayoutName(l).c_str(), seed, Counts(r).c_str(), r.finite ? "finite" : "NOT FINITE",
          r.nonzero ? "nonzero" : "HAVE ZEROS",
          r.violations.empty()
              ? ""
              : (" | " + std::to_string(r.violations.size()) + " model violation(s)").c_str(),
          numerics.c_str(), r.error.empty() ? "" : (" | ERROR: " + r.error).c_str());
      if (!r.error.empty()) ok = false;
      if (fixed && (!r.ones_everywhere() || !r.finite || !r.nonzero || !identical ||
                    !r.violations.empty())) {
        ok = false;
      }
    }
  }
  std::printf("fp8-repro: %s\n", ok ? (fixed ? "PASS (1/1 in every microbatch, identical numerics)"
                                             : "done (te-legacy: duplicates are the expected "
                                               "positive control)")
                                    : "FAIL");
  return ok ? 0 : 1;
}
