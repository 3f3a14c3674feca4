// TORCH_LIBRARY(fp8audit, ...): compiled only into the fp8audit_ops shared library, which Python
// loads with torch.ops.load_library(path) to call torch.ops.fp8audit.*.
#include <torch/library.h>

#include <string_view>

#include "kernels/torch_api.h"

namespace fp8audit::kernels {
namespace {

std::string_view view(c10::string_view s) { return std::string_view(s.data(), s.size()); }

std::tuple<at::Tensor, at::Tensor> op_cast_transpose(const at::Tensor& input,
                                                     const at::Tensor& scale,
                                                     const at::Tensor& amax,
                                                     const at::Tensor& scale_inv,
                                                     c10::string_view fp8_format) {
  return cast_transpose(input, scale, amax, scale_inv,
                        parse_fp8_format(view(fp8_format), "fp8audit.cast_transpose"));
}

at::Tensor op_quantize(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& amax,
                       const at::Tensor& scale_inv, c10::string_view fp8_format) {
  return quantize(input, scale, amax, scale_inv,
                  parse_fp8_format(view(fp8_format), "fp8audit.quantize"));
}

at::Tensor op_dequantize(const at::Tensor& data, const at::Tensor& scale_inv,
                         c10::string_view fp8_format, c10::ScalarType out_dtype) {
  return dequantize(data, scale_inv, parse_fp8_format(view(fp8_format), "fp8audit.dequantize"),
                    out_dtype);
}

void op_delayed_scaling_update(const at::Tensor& amax_history, const at::Tensor& scale,
                               const at::Tensor& scale_inv, c10::string_view fp8_format,
                               int64_t margin, c10::string_view amax_algo) {
  constexpr const char* kOp = "fp8audit.delayed_scaling_update";
  delayed_scaling_update(amax_history, scale, scale_inv, parse_fp8_format(view(fp8_format), kOp),
                         margin, parse_amax_algo(view(amax_algo), kOp));
}

}  // namespace
}  // namespace fp8audit::kernels

TORCH_LIBRARY(fp8audit, m) {
  m.def(
      "cast_transpose(Tensor input, Tensor scale, Tensor(a!) amax, Tensor(b!) scale_inv, "
      "str fp8_format) -> (Tensor rowwise, Tensor columnwise)");
  m.def(
      "quantize(Tensor input, Tensor scale, Tensor(a!) amax, Tensor(b!) scale_inv, "
      "str fp8_format) -> Tensor");
  m.def(
      "dequantize(Tensor data, Tensor scale_inv, str fp8_format, ScalarType out_dtype) -> Tensor");
  m.def(
      "delayed_scaling_update(Tensor(a!) amax_history, Tensor(b!) scale, Tensor(c!) scale_inv, "
      "str fp8_format, int margin, str amax_algo) -> ()");
}

TORCH_LIBRARY_IMPL(fp8audit, CompositeExplicitAutograd, m) {
  m.impl("cast_transpose", TORCH_FN(fp8audit::kernels::op_cast_transpose));
  m.impl("quantize", TORCH_FN(fp8audit::kernels::op_quantize));
  m.impl("dequantize", TORCH_FN(fp8audit::kernels::op_dequantize));
  m.impl("delayed_scaling_update", TORCH_FN(fp8audit::kernels::op_delayed_scaling_update));
}
