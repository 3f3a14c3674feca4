// Recorded text that is not UTF-8. Proto3 `string` fields must hold UTF-8 (protobuf refuses to
// parse anything else, and logs an error when serializing it), but kernel names, NVTX messages,
// argv and host names are bytes. A writer stores such a string escaped, as valid UTF-8 that stays
// readable in text and JSON reports, and sets the field's bit in the record's `escaped_fields`
// (Event, TraceHeader); a reader that needs the bytes restores them. Strings that are UTF-8 are
// stored unchanged and unmarked.
#pragma once

#include <string>
#include <string_view>

#include "fp8audit/trace.pb.h"

namespace fp8audit {

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` with every byte that is not part of a well-formed UTF-8 sequence written as \xNN (two
// lowercase hex digits) and every backslash as \\; well-formed sequences are kept. Always UTF-8.
std::string EscapeBytes(std::string_view s);

// The bytes EscapeBytes was given. False when `s` is not EscapeBytes output (`out` then holds
// what was decoded before the fault).
bool UnescapeBytes(std::string_view s, std::string* out);

// Escapes every string field of the record that is not UTF-8 and sets its bit in escaped_fields
// (a repeated field: all its elements, when any is not UTF-8). Returns true when any was escaped.
bool EscapeNonUtf8Fields(v1::Event* event);
bool EscapeNonUtf8Fields(v1::TraceHeader* header);

// Restores the recorded bytes of every marked field and clears its mark. The record may then hold
// strings that are not UTF-8: use it in memory, do not serialize it. False when a marked field is
// not escaped text (it is left as it was, still marked).
bool RestoreEscapedFields(v1::Event* event);
bool RestoreEscapedFields(v1::TraceHeader* header);

}  // namespace fp8audit
