// The fuzz target shared by the libFuzzer binary and the replay test: any bytes as a .fp8trace
// file, through the reader, the auditor and every renderer. Must never crash, hang or allocate
// without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8audit::testing {

int FuzzTraceInput(const uint8_t* data, size_t size);

// Small traces to start from: valid ones of each segmentation, and damaged ones.
std::vector<std::string> FuzzSeeds();

}  // namespace fp8audit::testing
