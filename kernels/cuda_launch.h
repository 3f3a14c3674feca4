// CUDA launchers for the FP8 kernels (no torch). All pointers are device pointers; every launch
// is asynchronous on `stream` and returns the launch's error code (cudaErrorInvalidValue for
// bad sizes or null pointers, checked before anything is launched).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels::cuda {

// rowwise[r][c] = columnwise[c][r] = encode_fp8(input[r][c] * *scale); *amax raised to
// max|input| (float bit order, as in reference.h) by one atomic per block, each issued only after
// a __threadfence() that follows all of that block's output stores; *scale_inv = 1 / *scale.
// The input is rows x cols row-major; any shape and alignment is accepted (interior tiles of
// suitably aligned tensors take the vectorised path, the rest a scalar path, both fenced).
cudaError_t cast_transpose(const void* input, DType dtype, int64_t rows, int64_t cols,
                           const float* scale, Fp8Type format, uint8_t* rowwise,
                           uint8_t* columnwise, float* amax, float* scale_inv, cudaStream_t stream);

// The same without the transposed output.
cudaError_t quantize(const void* input, DType dtype, int64_t n, const float* scale, Fp8Type format,
                     uint8_t* out, float* amax, float* scale_inv, cudaStream_t stream);

// out[i] = decode(input[i]) * *scale_inv, written as out_dtype (see reference.h).
cudaError_t dequantize(const uint8_t* input, int64_t n, const float* scale_inv, Fp8Type format,
                       DType out_dtype, void* out, cudaStream_t stream);

// ref::delayed_scaling_update for num_tensors tensors in one launch (one thread per tensor).
cudaError_t delayed_scaling_update(float* amax_history, int64_t history_len, int64_t num_tensors,
                                   float* scale, float* scale_inv, Fp8Type format, int margin,
                                   AmaxAlgo algo, cudaStream_t stream);

}  // namespace fp8audit::kernels::cuda
