#include "runtime/backend.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "kernels/reference.h"

namespace fp8audit::runtime::backend {
namespace {

// decode(op.data) * scale_inv as float32.
at::Tensor DequantizeCpu(const Fp8Operand& op) {
  at::Tensor out = at::empty(op.data.sizes(), op.data.options().dtype(at::kFloat));
  const float scale_inv = op.scale_inv.data_ptr<float>()[op.index];
  kernels::ref::dequantize(op.data.data_ptr<uint8_t>(), static_cast<size_t>(op.data.numel()),
                           scale_inv, op.format, kernels::DType::kFloat32, out.data_ptr<float>());
  return out;
}

}  // namespace

kernels::DType ToDType(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return kernels::DType::kBFloat16;
    case at::kHalf:
      return kernels::DType::kFloat16;
    case at::kFloat:
      return kernels::DType::kFloat32;
    default:
      throw std::invalid_argument(std::string("fp8audit runtime: unsupported dtype ") +
                                  c10::toString(t) + " (float32, bfloat16 or float16)");
  }
}

void CastTranspose(const at::Tensor& x2d, const float* scale, Fp8Type format, float* amax,
                   float* scale_inv, at::Tensor* rowwise, at::Tensor* columnwise) {
  if (x2d.device().is_cuda()) {
    cuda::CastTranspose(x2d, scale, format, amax, scale_inv, rowwise, columnwise);
    return;
  }
  const int64_t rows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const auto options = x2d.options().dtype(at::kByte);
  *rowwise = at::empty({rows, cols}, options);
  *columnwise = at::empty({cols, rows}, options);
  kernels::ref::cast_transpose(x2d.data_ptr(), ToDType(x2d.scalar_type()), rows, cols, *scale,
                               format, rowwise->data_ptr<uint8_t>(),
                               columnwise->data_ptr<uint8_t>(), amax, scale_inv);
}

at::Tensor GemmTN(const Fp8Operand& a, const Fp8Operand& b, at::ScalarType out_dtype,
                  const at::Tensor& bias, bool fast_accum) {
  if (a.data.device().is_cuda()) return cuda::GemmTN(a, b, out_dtype, bias, fast_accum);
  at::Tensor out = at::mm(DequantizeCpu(a), DequantizeCpu(b).t());
  if (bias.defined()) out.add_(bias.to(at::kFloat));
  return out_dtype == at::kFloat ? out : out.to(out_dtype);
}

void DelayedScalingUpdate(const at::Tensor& history, const at::Tensor& scale,
                          const at::Tensor& scale_inv, Fp8Type format, int margin,
                          kernels::AmaxAlgo algo) {
  if (history.device().is_cuda()) {
    cuda::DelayedScalingUpdate(history, scale, scale_inv, format, margin, algo);
    return;
  }
  kernels::ref::delayed_scaling_update(history.data_ptr<float>(), history.size(0), history.size(1),
                                       scale.data_ptr<float>(), scale_inv.data_ptr<float>(), format,
                                       margin, algo);
}

}  // namespace fp8audit::runtime::backend
