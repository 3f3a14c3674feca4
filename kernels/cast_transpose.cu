// Library entry point for the cast-transpose kernel: fenced instantiations only.
#include "kernels/cast_transpose_kernel.cuh"
#include "kernels/cuda_launch.h"

namespace fp8audit::kernels::cuda {
namespace {

template <typename T>
cudaError_t dispatch_format(const void* input, int64_t rows, int64_t cols, const float* scale,
                            Fp8Type format, uint8_t* rowwise, uint8_t* columnwise, float* amax,
                            float* scale_inv, cudaStream_t stream) {
  const T* in = static_cast<const T*>(input);
  if (format == Fp8Type::kE4M3) {
    return detail::launch_cast_transpose_kernel<T, Fp8Type::kE4M3, /*kFenced=*/true>(
        in, rows, cols, scale, rowwise, columnwise, amax, scale_inv, stream);
  }
  return detail::launch_cast_transpose_kernel<T, Fp8Type::kE5M2, /*kFenced=*/true>(
      in, rows, cols, scale, rowwise, columnwise, amax, scale_inv, stream);
}

}  // namespace

cudaError_t cast_transpose(const void* input, DType dtype, int64_t rows, int64_t cols,
                           const float* scale, Fp8Type format, uint8_t* rowwise,
                           uint8_t* columnwise, float* amax, float* scale_inv,
                           cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return dispatch_format<float>(input, rows, cols, scale, format, rowwise, columnwise, amax,
                                    scale_inv, stream);
    case DType::kBFloat16:
      return dispatch_format<__nv_bfloat16>(input, rows, cols, scale, format, rowwise, columnwise,
                                            amax, scale_inv, stream);
    case DType::kFloat16:
      return dispatch_format<__half>(input, rows, cols, scale, format, rowwise, columnwise, amax,
                                     scale_inv, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8audit::kernels::cuda
