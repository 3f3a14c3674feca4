// Parses the structured FP8 NVTX messages (grammar in proto/fp8audit/nvtx_events.h).
#pragma once

#include <string_view>

#include "fp8audit/trace.pb.h"

namespace fp8audit::agent {

// Fills kind and the keyed fields of `event` from `message`; detail is left to the caller.
// Returns false (event untouched) when the message is not a structured event.
bool ParseStructuredMessage(std::string_view message, ::fp8audit::v1::Event* event);

}  // namespace fp8audit::agent
