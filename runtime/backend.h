// The two backends behind the FP8 modules, chosen by the tensors' device at run time:
//  * CPU: FP8 emulated exactly with kernels/' bit-exact CPU references (quantize to FP8 codes,
//    dequantize, float32 GEMM on the dequantized values).
//  * CUDA: kernels/' CUDA kernels and FP8 GEMMs through cuBLASLt (sm_90+); no emulation. Built
//    only with the CUDA language; elsewhere every CUDA call throws "CUDA backend not built".
// FP8 tensors are uint8 tensors of codes. Scale, amax and scale_inv pointers live on the tensors'
// device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "kernels/fp8_format.h"
#include "runtime/recipe.h"

namespace fp8audit::runtime::backend {

// True when this build has the CUDA backend.
bool cuda_built();

// The kernels' dtype for a high-precision tensor dtype (float32, bfloat16, float16); throws
// std::invalid_argument naming any other.
kernels::DType ToDType(at::ScalarType t);

// An FP8 operand of a GEMM: codes [rows, cols] row-major, decoded value = code * (*scale_inv).
struct Fp8Operand {
  at::Tensor data;       // uint8, 2-D, contiguous
  at::Tensor scale_inv;  // float32, holds the scale_inv at `index`
  int64_t index = 0;
  Fp8Type format = Fp8Type::kE4M3;
};

// Quantizes x2d [rows, cols] (float32/bfloat16/float16, contiguous) with *scale into FP8 codes,
// rowwise [rows, cols] and columnwise [cols, rows]; raises *amax; writes 1/scale to *scale_inv.
void CastTranspose(const at::Tensor& x2d, const float* scale, Fp8Type format, float* amax,
                   float* scale_inv, at::Tensor* rowwise, at::Tensor* columnwise);

// out[m, n] = decode(a)[m, k] * decode(b)[n, k]^T (+ bias[n]), as out_dtype. Both operands are
// K-major (the "TN" layout FP8 tensor cores need). fast_accum: CUDA only, the tensor cores'
// fast FP8 accumulation (used for the forward GEMM, as Transformer Engine does).
at::Tensor GemmTN(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out_dtype,
                  const at::Tensor& bias, bool fast_accum = false);

// The DelayedScaling update of one direction of a buffer set (see kernels/reference.h).
void DelayedScalingUpdate(const at::Tensor& history, const at::Tensor& scale,
                          const at::Tensor& scale_inv, Fp8Type format, int margin,
                          kernels::AmaxAlgo algo);

namespace cuda {
// Implemented in backend_cuda.cc (CUDA builds) or as stubs that throw.
void CastTranspose(const at::Tensor& x2d, const float* scale, Fp8Type format, float* amax,
                   float* scale_inv, at::Tensor* rowwise, at::Tensor* columnwise);
at::Tensor GemmTN(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out_dtype,
                  const at::Tensor& bias, bool fast_accum);
void DelayedScalingUpdate(const at::Tensor& history, const at::Tensor& scale,
                          const at::Tensor& scale_inv, Fp8Type format, int margin,
                          kernels::AmaxAlgo algo);
}  // namespace cuda

}  // namespace fp8audit::runtime::backend
