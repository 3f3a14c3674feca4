#include "kernels/torch_api.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>

#include "kernels/reference.h"

#if FP8AUDIT_KERNELS_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/cuda_launch.h"
#endif

namespace fp8audit::kernels {
namespace {

bool is_high_precision(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    default:
      return DType::kFloat32;
  }
}

// Error messages are assembled from strings only (numbers through std::to_string): a copy of
// this library built on one CUDA image crashed inside std::ostream's integer insertion when
// loaded into Python, while string insertion worked there.
std::string Num(int64_t v) { return std::to_string(v); }

std::string List(at::IntArrayRef values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

std::string Name(at::ScalarType t) { return c10::toString(t); }
std::string Name(const at::Device& d) { return d.str(); }

void check_defined(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined(), op, ": argument '", name, "' is an undefined tensor");
}

// The main operand: supported device, contiguous, non-empty.
void check_operand(const at::Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), op, ": argument '", name,
              "' must be a CPU or CUDA tensor, got device ", Name(t.device()));
  if (t.device().is_cuda()) {
    TORCH_CHECK(cuda_kernels_available(), op, ": argument '", name, "' is on ", Name(t.device()),
                " but this fp8audit build has no CUDA kernels (CPU tensors only)");
  }
  TORCH_CHECK(t.numel() > 0, op, ": argument '", name, "' must not be empty, got shape ",
              List(t.sizes()));
  TORCH_CHECK(t.is_contiguous(), op, ": argument '", name, "' must be contiguous, got strides ",
              List(t.strides()), " for shape ", List(t.sizes()));
}

// A float32 companion tensor (scale, amax, ...) of `numel` elements on `device`.
void check_float_companion(const at::Tensor& t, int64_t numel, const at::Device& device,
                           const char* op, const char* name, const char* device_of) {
  check_defined(t, op, name);
  TORCH_CHECK(t.scalar_type() == at::kFloat, op, ": argument '", name,
              "' must have dtype float32, got ", Name(t.scalar_type()));
  TORCH_CHECK(t.numel() == numel, op, ": argument '", name, "' must have ", Num(numel),
              numel == 1 ? " element" : " elements", ", got shape ", List(t.sizes()));
  TORCH_CHECK(t.device() == device, op, ": argument '", name, "' must be on the same device as '",
              device_of, "' (", Name(device), "), got ", Name(t.device()));
  TORCH_CHECK(t.is_contiguous(), op, ": argument '", name, "' must be contiguous, got strides ",
              List(t.strides()));
}

// Byte ranges of two tensors' elements intersect.
bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.device() != b.device()) return false;
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  const auto* a1 = a0 + a.numel() * static_cast<int64_t>(a.element_size());
  const auto* b1 = b0 + b.numel() * static_cast<int64_t>(b.element_size());
  return a0 < b1 && b0 < a1;
}

void check_disjoint(std::initializer_list<std::pair<const at::Tensor*, const char*>> tensors,
                    const char* op) {
  for (auto i = tensors.begin(); i != tensors.end(); ++i) {
    for (auto j = i + 1; j != tensors.end(); ++j) {
      TORCH_CHECK(!overlaps(*i->first, *j->first), op, ": arguments '", i->second, "' and '",
                  j->second, "' must not share memory");
    }
  }
}

void check_quantize_args(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& amax,
                         const at::Tensor& scale_inv, const char* op) {
  check_defined(input, op, "input");
  TORCH_CHECK(is_high_precision(input.scalar_type()), op,
              ": argument 'input' must have dtype float32, bfloat16 or float16, got ",
              Name(input.scalar_type()));
  check_operand(input, op, "input");
  check_float_companion(scale, 1, input.device(), op, "scale", "input");
  check_float_companion(amax, 1, input.device(), op, "amax", "input");
  check_float_companion(scale_inv, 1, input.device(), op, "scale_inv", "input");
  check_disjoint({{&input, "input"}, {&scale, "scale"}, {&amax, "amax"}, {&scale_inv, "scale_inv"}},
                 op);
}

#if FP8AUDIT_KERNELS_TORCH_CUDA
void check_cuda(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, op, ": CUDA kernel launch failed: ", cudaGetErrorString(err));
}
#endif

}  // namespace

Fp8Type parse_fp8_format(std::string_view name, const char* op) {
  if (const std::optional<Fp8Type> t = ParseFp8Type(name)) return *t;
  TORCH_CHECK(false, op, ": argument 'fp8_format' must be \"", Fp8TypeName(Fp8Type::kE4M3),
              "\" or \"", Fp8TypeName(Fp8Type::kE5M2), "\", got \"", std::string(name), "\"");
  return Fp8Type::kE4M3;
}

AmaxAlgo parse_amax_algo(std::string_view name, const char* op) {
  if (name == "max") return AmaxAlgo::kMax;
  if (name == "most_recent") return AmaxAlgo::kMostRecent;
  TORCH_CHECK(false, op, ": argument 'amax_algo' must be \"max\" or \"most_recent\", got \"",
              std::string(name), "\"");
  return AmaxAlgo::kMax;
}

bool cuda_kernels_available() { return FP8AUDIT_KERNELS_TORCH_CUDA != 0; }

std::tuple<at::Tensor, at::Tensor> cast_transpose(const at::Tensor& input, const at::Tensor& scale,
                                                  const at::Tensor& amax,
                                                  const at::Tensor& scale_inv, Fp8Type format) {
  constexpr const char* kOp = "fp8audit.cast_transpose";
  check_defined(input, kOp, "input");
  TORCH_CHECK(input.dim() >= 1, kOp, ": argument 'input' must have at least 1 dimension, got ",
              Num(input.dim()));
  check_quantize_args(input, scale, amax, scale_inv, kOp);
  const int64_t cols = input.size(-1);
  const int64_t rows = input.numel() / cols;
  const auto options = input.options().dtype(at::kByte);
  at::Tensor rowwise = at::empty(input.sizes(), options);
  at::Tensor columnwise = at::empty({cols, rows}, options);
  if (input.device().is_cpu()) {
    ref::cast_transpose(input.data_ptr(), to_dtype(input.scalar_type()), rows, cols,
                        scale.item<float>(), format, rowwise.data_ptr<uint8_t>(),
                        columnwise.data_ptr<uint8_t>(), amax.data_ptr<float>(),
                        scale_inv.data_ptr<float>());
  } else {
#if FP8AUDIT_KERNELS_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(input.device());
    check_cuda(cuda::cast_transpose(input.data_ptr(), to_dtype(input.scalar_type()), rows, cols,
                                    scale.data_ptr<float>(), format, rowwise.data_ptr<uint8_t>(),
                                    columnwise.data_ptr<uint8_t>(), amax.data_ptr<float>(),
                                    scale_inv.data_ptr<float>(),
                                    c10::cuda::getCurrentCUDAStream().stream()),
               kOp);
#endif
  }
  return {rowwise, columnwise};
}

at::Tensor quantize(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& amax,
                    const at::Tensor& scale_inv, Fp8Type format) {
  constexpr const char* kOp = "fp8audit.quantize";
  check_quantize_args(input, scale, amax, scale_inv, kOp);
  at::Tensor out = at::empty(input.sizes(), input.options().dtype(at::kByte));
  if (input.device().is_cpu()) {
    ref::quantize(input.data_ptr(), to_dtype(input.scalar_type()),
                  static_cast<size_t>(input.numel()), scale.item<float>(), format,
                  out.data_ptr<uint8_t>(), amax.data_ptr<float>(), scale_inv.data_ptr<float>());
  } else {
#if FP8AUDIT_KERNELS_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(input.device());
    check_cuda(cuda::quantize(input.data_ptr(), to_dtype(input.scalar_type()), input.numel(),
                              scale.data_ptr<float>(), format, out.data_ptr<uint8_t>(),
                              amax.data_ptr<float>(), scale_inv.data_ptr<float>(),
                              c10::cuda::getCurrentCUDAStream().stream()),
               kOp);
#endif
  }
  return out;
}

at::Tensor dequantize(const at::Tensor& data, const at::Tensor& scale_inv, Fp8Type format,
                      at::ScalarType out_dtype) {
  constexpr const char* kOp = "fp8audit.dequantize";
  check_defined(data, kOp, "data");
  TORCH_CHECK(data.scalar_type() == at::kByte, kOp,
              ": argument 'data' must have dtype uint8 (FP8 codes), got ",
              Name(data.scalar_type()));
  check_operand(data, kOp, "data");
  check_float_companion(scale_inv, 1, data.device(), kOp, "scale_inv", "data");
  TORCH_CHECK(is_high_precision(out_dtype), kOp,
              ": argument 'out_dtype' must be float32, bfloat16 or float16, got ", Name(out_dtype));
  at::Tensor out = at::empty(data.sizes(), data.options().dtype(out_dtype));
  if (data.device().is_cpu()) {
    ref::dequantize(data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel()),
                    scale_inv.item<float>(), format, to_dtype(out_dtype), out.data_ptr());
  } else {
#if FP8AUDIT_KERNELS_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(data.device());
    check_cuda(cuda::dequantize(data.data_ptr<uint8_t>(), data.numel(), scale_inv.data_ptr<float>(),
                                format, to_dtype(out_dtype), out.data_ptr(),
                                c10::cuda::getCurrentCUDAStream().stream()),
               kOp);
#endif
  }
  return out;
}

void delayed_scaling_update(const at::Tensor& amax_history, const at::Tensor& scale,
                            const at::Tensor& scale_inv, Fp8Type format, int64_t margin,
                            AmaxAlgo algo) {
  constexpr const char* kOp = "fp8audit.delayed_scaling_update";
  check_defined(amax_history, kOp, "amax_history");
  TORCH_CHECK(amax_history.scalar_type() == at::kFloat, kOp,
              ": argument 'amax_history' must have dtype float32, got ",
              Name(amax_history.scalar_type()));
  TORCH_CHECK(amax_history.dim() == 2, kOp,
              ": argument 'amax_history' must be 2-D [history_length, num_tensors], got shape ",
              List(amax_history.sizes()));
  check_operand(amax_history, kOp, "amax_history");
  const int64_t history_len = amax_history.size(0);
  const int64_t num_tensors = amax_history.size(1);
  check_float_companion(scale, num_tensors, amax_history.device(), kOp, "scale", "amax_history");
  check_float_companion(scale_inv, num_tensors, amax_history.device(), kOp, "scale_inv",
                        "amax_history");
  TORCH_CHECK(margin >= -126 && margin <= 127, kOp,
              ": argument 'margin' must lie in [-126, 127], got ", Num(margin));
  check_disjoint({{&amax_history, "amax_history"}, {&scale, "scale"}, {&scale_inv, "scale_inv"}},
                 kOp);
  if (amax_history.device().is_cpu()) {
    ref::delayed_scaling_update(amax_history.data_ptr<float>(), history_len, num_tensors,
                                scale.data_ptr<float>(), scale_inv.data_ptr<float>(), format,
                                static_cast<int>(margin), algo);
  } else {
#if FP8AUDIT_KERNELS_TORCH_CUDA
    const c10::cuda::CUDAGuard guard(amax_history.device());
    check_cuda(cuda::delayed_scaling_update(
                   amax_history.data_ptr<float>(), history_len, num_tensors,
                   scale.data_ptr<float>(), scale_inv.data_ptr<float>(), format,
                   static_cast<int>(margin), algo, c10::cuda::getCurrentCUDAStream().stream()),
               kOp);
#endif
  }
}

}  // namespace fp8audit::kernels
