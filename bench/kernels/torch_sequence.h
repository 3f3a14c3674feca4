// The PyTorch op sequence that cast-transpose replaces, timed on the benchmark's own buffers.
#pragma once

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels::bench {

// Median milliseconds of: amax = x.abs().amax(); scale = fp8_max / amax;
// y = (x * scale).to(float8); yt = y.t().contiguous(); over `reps` runs rotating through
// `num_buffers` inputs of rows x cols (device pointers). Returns a negative value when this
// libtorch has no float8 dtypes.
double TorchSequenceMedianMs(void* const* inputs, int num_buffers, DType dtype, int64_t rows,
                             int64_t cols, Fp8Type format, int warmup, int reps);

}  // namespace fp8audit::kernels::bench
