// libFuzzer entry point (built with FP8AUDIT_FUZZ=ON): see fuzz_target.h.
#include <cstddef>
#include <cstdint>

#include "tests/reports/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fp8audit::testing::FuzzTraceInput(data, size);
}
