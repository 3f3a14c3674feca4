// Runs the fuzz target over the seeds and deterministic mutations of them in every build (the
// libFuzzer run itself needs clang and FP8AUDIT_FUZZ=ON).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "tests/reports/fuzz_target.h"

namespace fp8audit::testing {
namespace {

void RunInput(const std::string& input) {
  FuzzTraceInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(TraceFuzzTarget, SeedsAndTheirPrefixesNeverCrash) {
  for (const std::string& seed : FuzzSeeds()) {
    for (size_t n = 0; n <= seed.size(); ++n) RunInput(seed.substr(0, n));
  }
}

TEST(TraceFuzzTarget, MutatedSeedsNeverCrash) {
  std::mt19937_64 rng(20240601);
  const auto seeds = FuzzSeeds();
  for (int round = 0; round < 3000; ++round) {
    std::string input = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !input.empty(); ++e) {
      const size_t at = rng() % input.size();
      switch (rng() % 5) {
        case 0:
          input[at] = static_cast<char>(input[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          input[at] = static_cast<char>(rng());
          break;
        case 2:
          input.insert(at, 1, static_cast<char>(rng()));
          break;
        case 3:
          input.erase(at, 1 + rng() % 8);
          break;
        default: {
          const std::string& other = seeds[rng() % seeds.size()];
          input.insert(at, other.substr(rng() % other.size()));
        }
      }
    }
    RunInput(input);
  }
}

TEST(TraceFuzzTarget, HostileSizesAreDamageNotAllocation) {
  RunInput(std::string("\xff\xff\xff\xff\x0f", 5));       // 4 GiB record
  RunInput(std::string("\x80\x80\x80\x80\x80\x80", 6));   // endless varint
  RunInput(std::string("\xff\xff\xff\x07", 4) + "x");     // just under the limit, 1 byte present
  RunInput(std::string(1, '\0') + std::string(1, '\0'));  // empty records
}

}  // namespace
}  // namespace fp8audit::testing
