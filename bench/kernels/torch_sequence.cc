#include "torch_sequence.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <algorithm>
#include <vector>

namespace fp8audit::kernels::bench {

double TorchSequenceMedianMs(void* const* inputs, int num_buffers, DType dtype, int64_t rows,
                             int64_t cols, Fp8Type format, int warmup, int reps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  const at::ScalarType in_type = dtype == DType::kFloat32    ? at::kFloat
                                 : dtype == DType::kBFloat16 ? at::kBFloat16
                                                             : at::kHalf;
  const at::ScalarType fp8 = format == Fp8Type::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  const float max_value = fp8_max(format);
  std::vector<at::Tensor> xs;
  for (int i = 0; i < num_buffers; ++i) {
    xs.push_back(at::from_blob(inputs[i], {rows, cols},
                               at::TensorOptions().dtype(in_type).device(at::kCUDA)));
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    const at::Tensor& x = xs[i % num_buffers];
    cudaEventRecord(start, stream);
    const at::Tensor amax = x.abs().amax().to(at::kFloat);
    const at::Tensor scale = max_value / amax;
    const at::Tensor y = (x * scale).to(fp8);
    const at::Tensor yt = y.t().contiguous();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    if (i >= warmup) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
#else
  (void)inputs, (void)num_buffers, (void)dtype, (void)rows, (void)cols, (void)format;
  (void)warmup, (void)reps;
  return -1.0;
#endif
}

}  // namespace fp8audit::kernels::bench
