// The CUDA backend: kernels/' fenced CUDA kernels for quantization and the DelayedScaling update,
// and FP8 GEMMs through cuBLASLt on raw device pointers (no c10/cuda headers: the current stream
// comes from c10's device-generic guard interface). A GEMM call only enqueues work: descriptors,
// the heuristic's algorithm, the compute capability check and the workspace are made once (per
// shape, device, and device and stream) and reused; nothing synchronises.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

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

cudaDataType_t CudaTypeOf(Fp8Type f) {
  return f == Fp8Type::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
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

// Compute capability as major * 10 + minor.
int ComputeCapability(int device) {
  int major = 0;
  int minor = 0;
  Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute");
  Check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
        "cudaDeviceGetAttribute");
  return major * 10 + minor;
}

// The cuBLASLt descriptors and algorithm of one GEMM shape. The scale pointers are set per call.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() = default;
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// device, m, n, k, format of a, format of b, output dtype, fast accumulation.
using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int, int, int, bool>;

// What GEMM calls reuse, behind one mutex held while a call enqueues its GEMM (the plan's scale
// pointers are set per call). Never destroyed: autograd graphs may outlive static destruction.
struct GemmCache {
  std::mutex mu;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::map<int, int> capability;                                  // device -> sm
  std::map<std::pair<int, cudaStream_t>, at::Tensor> workspaces;  // kWorkspaceBytes each

  static GemmCache& Get() {
    static GemmCache* cache = new GemmCache();
    return *cache;
  }
};

// Throws unless the device can run FP8 GEMMs (checked once per device). Lock held.
void RequireFp8GemmLocked(GemmCache& cache, const at::Device& device) {
  auto it = cache.capability.find(device.index());
  if (it == cache.capability.end()) {
    it = cache.capability.emplace(device.index(), ComputeCapability(device.index())).first;
  }
  if (it->second < 89) {
    throw std::runtime_error(
        "fp8audit runtime: FP8 GEMM needs compute capability 8.9 or newer "
        "(sm_90 on H100/H200); " +
        device.str() + " is sm_" + std::to_string(it->second));
  }
}

void SetScalePointers(const Plan& plan, const float* a_scale, const float* b_scale) {
  Check(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                       sizeof(a_scale)),
        "A_SCALE_POINTER");
  Check(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                       sizeof(b_scale)),
        "B_SCALE_POINTER");
}

// Row-major out[m, n] = a[m, k] b[n, k]^T is column-major out^T[n, m] = op_T(B) op_N(A) with
// B := b viewed column-major [k, n] and A := a viewed column-major [k, m]. `a_scale`, `b_scale`:
// cuBLASLt's A and B (our b and a).
std::unique_ptr<Plan> MakePlan(int64_t m, int64_t n, int64_t k, Fp8Type a_format, Fp8Type b_format,
                               at::ScalarType out_dtype, bool fast_accum, const float* a_scale,
                               const float* b_scale) {
  auto plan = std::make_unique<Plan>();
  Check(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t trans_t = CUBLAS_OP_T;
  const cublasOperation_t trans_n = CUBLAS_OP_N;
  Check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_t,
                                       sizeof(trans_t)),
        "TRANSA");
  Check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_n,
                                       sizeof(trans_n)),
        "TRANSB");
  SetScalePointers(*plan, a_scale, b_scale);
  const int8_t fast = fast_accum ? 1 : 0;
  Check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                       sizeof(fast)),
        "FAST_ACCUM");
  Check(cublasLtMatrixLayoutCreate(&plan->a, CudaTypeOf(b_format), k, n, k), "layout A");
  Check(cublasLtMatrixLayoutCreate(&plan->b, CudaTypeOf(a_format), k, m, k), "layout B");
  Check(cublasLtMatrixLayoutCreate(&plan->c, OutType(out_dtype), n, m, n), "layout C/D");
  Preference p;
  Check(cublasLtMatmulPreferenceCreate(&p.pref), "PreferenceCreate");
  const size_t workspace_bytes = kWorkspaceBytes;
  Check(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  Check(cublasLtMatmulAlgoGetHeuristic(Handle(), plan->op, plan->a, plan->b, plan->c, plan->c,
                                       p.pref, 1, &heuristic, &found),
        "AlgoGetHeuristic");
  if (found == 0) {
    throw std::runtime_error(
        "fp8audit runtime: cuBLASLt has no FP8 algorithm for M=" + std::to_string(m) +
        " N=" + std::to_string(n) + " K=" + std::to_string(k));
  }
  plan->algo = heuristic.algo;
  return plan;
}

}  // namespace

void CastTranspose(const at::Tensor& x2d, const float* scale, Fp8Type format, float* amax,
                   float* scale_inv, at::Tensor* rowwise, at::Tensor* columnwise) {
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
  if (a.format == Fp8Type::kE5M2 && b.format == Fp8Type::kE5M2) {
    throw std::invalid_argument("fp8audit runtime: E5M2 x E5M2 FP8 GEMM is not supported");
  }
  at::Tensor out = at::empty({m, n}, a.data.options().dtype(out_dtype));
  const cudaStream_t stream = CurrentStream(device);
  const float* a_scale = b.scale_inv.data_ptr<float>() + b.index;
  const float* b_scale = a.scale_inv.data_ptr<float>() + a.index;
  {
    GemmCache& cache = GemmCache::Get();
    std::lock_guard<std::mutex> lock(cache.mu);
    RequireFp8GemmLocked(cache, device);
    const PlanKey key{device.index(),
                      m,
                      n,
                      k,
                      static_cast<int>(a.format),
                      static_cast<int>(b.format),
                      static_cast<int>(out_dtype),
                      fast_accum};
    auto it = cache.plans.find(key);
    if (it == cache.plans.end()) {
      it = cache.plans
               .emplace(key, MakePlan(m, n, k, a.format, b.format, out_dtype, fast_accum, a_scale,
                                      b_scale))
               .first;
    }
    const Plan& plan = *it->second;
    SetScalePointers(plan, a_scale, b_scale);
    // One workspace per device and stream: GEMMs on one stream run one after another.
    at::Tensor& workspace = cache.workspaces[{device.index(), stream}];
    if (!workspace.defined()) {
      workspace =
          at::empty({static_cast<int64_t>(kWorkspaceBytes)}, a.data.options().dtype(at::kByte));
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    Check(cublasLtMatmul(Handle(), plan.op, &alpha, b.data.data_ptr(), plan.a, a.data.data_ptr(),
                         plan.b, &beta, out.data_ptr(), plan.c, out.data_ptr(), plan.c, &plan.algo,
                         workspace.data_ptr(), kWorkspaceBytes, stream),
          "cublasLtMatmul");
  }
  if (bias.defined()) out.add_(bias.to(out_dtype));
  return out;
}

void DelayedScalingUpdate(const at::Tensor& history, const at::Tensor& scale,
                          const at::Tensor& scale_inv, Fp8Type format, int margin,
                          kernels::AmaxAlgo algo) {
  const c10::DeviceGuard guard(history.device());
  Check(kernels::cuda::delayed_scaling_update(
            history.data_ptr<float>(), history.size(0), history.size(1), scale.data_ptr<float>(),
            scale_inv.data_ptr<float>(), format, margin, algo, CurrentStream(history.device())),
        "delayed_scaling_update launch");
}

}  // namespace cuda
}  // namespace fp8audit::runtime::backend
