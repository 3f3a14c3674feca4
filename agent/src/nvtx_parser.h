// Parses the structured FP8 NVTX messages (grammar in proto/fp8audit/nvtx_events.h, its words in
// fp8audit/nvtx_grammar.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "fp8audit/trace.pb.h"

namespace fp8audit::agent {

// Fills kind and the keyed fields of `event` from `message`; detail is left to the caller.
// Returns false (event untouched) when the message is not a structured event.
bool ParseStructuredMessage(std::string_view message, ::fp8audit::v1::Event* event);

// Whether a range's text is the microbatch range `range`: exactly its name, or its name followed by
// a space and keys (nvtx::kMicrobatchRange, then " id=7").
bool IsMicrobatchRange(std::string_view text, std::string_view range);

// The logical microbatch id a microbatch range names (its key id=<uint>); false when it names
// none or the value is not a number.
bool ParseMicrobatchId(std::string_view text, uint64_t* id);

}  // namespace fp8audit::agent
