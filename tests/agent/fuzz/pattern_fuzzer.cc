// libFuzzer target: the pattern-file parser and the classifier it builds. Any input must parse or
// fail with one line naming SOURCE:LINE, in bounded time and memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8audit/patterns.h"

namespace {

const std::string& LongName() {
  static const std::string name = [] {
    std::string n = "cutlass::Kernel<";
    while (n.size() < 6000) n += "cutlass::gemm::GemmShape<128, 256, 64>, ";
    return n + "float>(Params)";
  }();
  return name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fp8audit::agent::Classifier;
  using fp8audit::agent::PatternRule;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<PatternRule> rules;
  std::string error;
  if (!fp8audit::agent::ParsePatterns(text, "fuzz.patterns", &rules, &error)) {
    if (error.empty() || error.find('\n') != std::string::npos ||
        error.rfind("fuzz.patterns:", 0) != 0) {
      __builtin_trap();  // every failure is one line naming the source
    }
    return 0;
  }
  const Classifier classifier(std::move(rules));
  const std::string_view names[] = {
      "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::"
      "amax_and_scale_update_impl::kernel_bulk(float*, transformer_engine::"
      "delayed_scaling_recipe::(anonymous namespace)::AmaxParams, unsigned long, "
      "transformer_engine::delayed_scaling_recipe::(anonymous namespace)::AmaxComputeAlgo, float)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
      "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
      "", "_Z6kernelv", text.substr(0, 256)};
  for (std::string_view name : names) classifier.Match(name);
  classifier.Match(LongName());
  return 0;
}
