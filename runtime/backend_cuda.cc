// The CUDA backend: kernels/' fenced CUDA kernels for quantization and the DelayedScaling update,
// and FP8 GEMMs through cuBLASLt on raw device pointers (no c10/cuda headers: the current stream
// comes from c10's device-generic guard interface).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda_launch.h"
#include "runtime/backend.h"

namespace fp8audit::runtime::backend {

bool cuda_built() { return true; }

namespace cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

// The stream torch's operators use on `device`.
cudaStream_t CurrentStream(const at::Device& device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return static_cast<cudaStream_t>(impl.getStreamNativeHandle(impl.getStream(device)));
#else
  (void)device;
  return nullptr;  // older libtorch: its default current stream, the legacy default stream
#endif
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("fp8audit runtime (CUDA): ") + what + ": " +
                             cudaGetErrorString(err));
  }
}

void Check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("fp8audit runtime (cuBLASLt): ") + what +
                             " failed with status " + std::to_string(static_cast<int>(status)));
  }
}

cudaDataType_t Fp8Type(kernels::Fp8Format f) {
  return f == kernels::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cudaDataType_t OutType(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return CUDA_R_16BF;
    case at::kHalf:
      return CUDA_R_16F;
    case at::kFloat:
      return CUDA_R_32F;
    default:
      throw std::invalid_argument(std::string("fp8audit runtime: unsupported output dtype ") +
                                  c10::toString(t));
  }
}

cublasLtHandle_t Handle() {
  static std::once_flag once;
  static cublasLtHandle_t handle = nullptr;
  std::call_once(once, [] { Check(cublasLtCreate(&handle), "cublasLtCreate"); });
  return handle;
}

void RequireFp8Gemm(const at::Device& device) {
  int major = 0;
  int minor = 0;
  Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()),
        "cudaDeviceGetAttribute");
  Check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index()),
        "cudaDeviceGetAttribute");
  if (major * 10 + minor < 89) {
    throw std::runtime_error(
        "fp8audit runtime: FP8 GEMM needs compute capability 8.9 or newer "
        "(sm_90 on H100/H200); " +
        device.str() + " is sm_" + std::to_string(major * 10 + minor));
  }
}

// RAII for the cuBLASLt descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

void CastTranspose(const at::Tensor& x2d, const float* scale, kernels::Fp8Format format,
                   float* amax, float* scale_inv, at::Tensor* rowwise, at::Tensor* columnwise) {
  const c10::DeviceGuard guard(x2d.device());
  const int64_t rows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const auto options = x2d.options().dtype(at::kByte);
  *rowwise = at::empty({rows, cols}, options);
  *columnwise = at::empty({cols, rows}, options);
  Check(kernels::cuda::cast_transpose(x2d.data_ptr(), ToDType(x2d.scalar_type()), rows, cols, scale,
                                      format, rowwise->data_ptr<uint8_t>(),
                                      columnwise->data_ptr<uint8_t>(), amax, scale_inv,
                                      CurrentStream(x2d.device())),
        "cast_transpose launch");
}

at::Tensor GemmTN(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out_dtype,
                  const at::Tensor& bias, bool fast_accum) {
  const at::Device device = a.data.device();
  const c10::DeviceGuard guard(device);
  RequireFp8Gemm(device);
  const int64_t m = a.data.size(0);
  const int64_t k = a.data.size(1);
  const int64_t n = b.data.size(0);
  if (b.data.size(1) != k) {
    throw std::invalid_argument("fp8audit runtime: FP8 GEMM operands disagree on K (" +
                                std::to_string(k) + " vs " + std::to_string(b.data.size(1)) + ")");
  }
  if (m % 16 != 0 || n % 16 != 0 || k % 16 != 0) {
    throw std::invalid_argument(
        "fp8audit runtime: the CUDA FP8 GEMM needs every dimension to be a multiple of 16, got "
        "M=" +
        std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  if (a.format == kernels::Fp8Format::kE5M2 && b.format == kernels::Fp8Format::kE5M2) {
    throw std::invalid_argument("fp8audit runtime: E5M2 x E5M2 FP8 GEMM is not supported");
  }
  at::Tensor out = at::empty({m, n}, a.data.options().dtype(out_dtype));
  at::Tensor workspace =
      at::empty({static_cast<int64_t>(kWorkspaceBytes)}, a.data.options().dtype(at::kByte));
  const cudaStream_t stream = CurrentStream(device);

  // Row-major out[m, n] = a[m, k] b[n, k]^T is column-major out^T[n, m] = op_T(B) op_N(A) with
  // B := b viewed column-major [k, n] and A := a viewed column-major [k, m].
  Descriptors d;
  Check(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t trans_t = CUBLAS_OP_T;
  const cublasOperation_t trans_n = CUBLAS_OP_N;
  Check(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_t, sizeof(trans_t)),
      "TRANSA");
  Check(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_n, sizeof(trans_n)),
      "TRANSB");
  const float* a_scale = b.scale_inv.data_ptr<float>() + b.index;
  const float* b_scale = a.scale_inv.data_ptr<float>() + a.index;
  Check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                       sizeof(a_scale)),
        "A_SCALE_POINTER");
  Check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                       sizeof(b_scale)),
        "B_SCALE_POINTER");
  const int8_t fast = fast_accum ? 1 : 0;
  Check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)),
        "FAST_ACCUM");
  Check(cublasLtMatrixLayoutCreate(&d.a, Fp8Type(b.format), k, n, k), "layout A");
  Check(cublasLtMatrixLayoutCreate(&d.b, Fp8Type(a.format), k, m, k), "layout B");
  Check(cublasLtMatrixLayoutCreate(&d.c, OutType(out_dtype), n, m, n), "layout C/D");
  Check(cublasLtMatmulPreferenceCreate(&d.pref), "PreferenceCreate");
  const size_t workspace_bytes = kWorkspaceBytes;
  Check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  Check(cublasLtMatmulAlgoGetHeuristic(Handle(), d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heuristic,
                                       &found),
        "AlgoGetHeuristic");
  if (found == 0) {
    throw std::runtime_error(
        "fp8audit runtime: cuBLASLt has no FP8 algorithm for M=" + std::to_string(m) +
        " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  Check(cublasLtMatmul(Handle(), d.op, &alpha, b.data.data_ptr(), d.a, a.data.data_ptr(), d.b,
                       &beta, out.data_ptr(), d.c, out.data_ptr(), d.c, &heuristic.algo,
                       workspace.data_ptr(), workspace_bytes, stream),
        "cublasLtMatmul");
  if (bias.defined()) out.add_(bias.to(out_dtype));
  return out;
}

void DelayedScalingUpdate(const at::Tensor& history, const at::Tensor& scale,
                          const at::Tensor& scale_inv, kernels::Fp8Format format, int margin,
                          kernels::AmaxAlgo algo) {
  const c10::DeviceGuard guard(history.device());
  Check(kernels::cuda::delayed_scaling_update(
            history.data_ptr<float>(), history.size(0), history.size(1), scale.data_ptr<float>(),
            scale_inv.data_ptr<float>(), format, margin, algo, CurrentStream(history.device())),
        "delayed_scaling_update launch");
}

}  // namespace cuda
}  // namespace fp8audit::runtime::backend
