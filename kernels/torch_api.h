// The kernels over torch::Tensor (at::Tensor). CPU tensors run the bit-exact CPU reference; CUDA
// tensors run the fenced CUDA kernels on the current stream (when built with CUDA and a CUDA
// libtorch). FP8 data is carried as torch.uint8 tensors of codes (kept from libtorch 1.13, which
// had no float8 dtypes; with PyTorch 2.x `codes.view(torch.float8_e4m3fn)` / `float8_e5m2`
// reinterprets them without a copy). Every argument is checked (defined, dtype, shape, device,
// contiguity, non-empty, no shared memory between inputs and outputs); a failure throws c10::Error
// naming the operator and the argument. Nothing is written when a check fails.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>
#include <tuple>

#include "kernels/fp8_format.h"

namespace fp8audit::kernels {

// "e4m3" | "e5m2" (ParseFp8Type, E4M3 and E5M2 too); anything else throws, naming `op` and the
// argument fp8_format.
Fp8Type parse_fp8_format(std::string_view name, const char* op);
// "max" | "most_recent"; anything else throws.
AmaxAlgo parse_amax_algo(std::string_view name, const char* op);

// True when CUDA tensors are accepted (CUDA kernels built in and libtorch has CUDA).
bool cuda_kernels_available();

// input: float32/bfloat16/float16, >= 1 dimension, viewed as [prod(shape[:-1]), shape[-1]].
// scale, amax, scale_inv: float32 with one element, on input's device. amax is raised to
// max(amax, max|input|) and scale_inv set to 1/scale, in place. Returns (rowwise, columnwise):
// uint8 FP8 codes, rowwise with input's shape, columnwise [shape[-1], prod(shape[:-1])].
std::tuple<at::Tensor, at::Tensor> cast_transpose(const at::Tensor& input, const at::Tensor& scale,
                                                  const at::Tensor& amax,
                                                  const at::Tensor& scale_inv, Fp8Type format);

// As cast_transpose without the transposed output; input may have any shape (non-empty).
at::Tensor quantize(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& amax,
                    const at::Tensor& scale_inv, Fp8Type format);

// data: uint8 FP8 codes; scale_inv: float32, one element. Returns decode(data) * scale_inv as
// out_dtype (float32, bfloat16 or float16), with data's shape.
at::Tensor dequantize(const at::Tensor& data, const at::Tensor& scale_inv, Fp8Type format,
                      at::ScalarType out_dtype);

// amax_history: float32 [history_len, num_tensors]; scale, scale_inv: float32 with num_tensors
// elements; all on one device. Updated in place as ref::delayed_scaling_update describes.
// margin in [-126, 127].
void delayed_scaling_update(const at::Tensor& amax_history, const at::Tensor& scale,
                            const at::Tensor& scale_inv, Fp8Type format, int64_t margin,
                            AmaxAlgo algo);

}  // namespace fp8audit::kernels
