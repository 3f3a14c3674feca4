// What a user does next about a failing audit, decided once with the outcome (trace_set.cc) and
// printed by every renderer as it is: rerun under the fix where Transformer Engine was recorded,
// report the traces where the fix was already in force, or say that there is nothing to patch.
#pragma once

#include <string>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The line for `report` once its outcome is decided; "" unless it found violations.
std::string NextStep(const v1::AuditReport& report);

}  // namespace fp8audit::reports
