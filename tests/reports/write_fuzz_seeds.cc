// Writes the fuzz seeds (fuzz_target.h) into SEEDS, the fuzz test's starting corpus, and creates
// the further directories named (where the fuzzer keeps what it finds).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tests/reports/fuzz_target.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: write_fuzz_seeds SEEDS [DIR...]\n";
    return 2;
  }
  for (int i = 1; i < argc; ++i) std::filesystem::create_directories(argv[i]);
  const auto seeds = fp8audit::testing::FuzzSeeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::filesystem::path(argv[1]) / ("seed-" + std::to_string(i)),
                      std::ios::binary | std::ios::trunc);
    out << seeds[i];
    if (!out) return 1;
  }
  return 0;
}
