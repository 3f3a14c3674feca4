// JSON rendering: protobuf's own printer on the AuditReport, nothing written by hand.
#include <google/protobuf/util/json_util.h>

#include "reports/render.h"

namespace fp8audit::reports {

bool RenderJson(const v1::AuditReport& report, std::string* out, std::string* error) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  // Fields at their default (0, "", false) are omitted, as the proto3 JSON mapping says: printing
  // them makes the printer build the whole document as a tree first (about 4 KiB per microbatch
  // row), which long traces cannot afford.
  options.always_print_primitive_fields = false;
  out->clear();
  const auto status = google::protobuf::util::MessageToJsonString(report, out, options);
  if (!status.ok()) {
    *error = "JSON printing failed: " + status.ToString();
    return false;
  }
  if (out->empty() || out->back() != '\n') *out += '\n';
  return true;
}

}  // namespace fp8audit::reports
