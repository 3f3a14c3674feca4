// What the auditor tests share: the explanations of a microbatch row as one string.
#pragma once

#include <string>

#include "fp8audit/report.pb.h"

namespace fp8audit::testing {

inline std::string AllExplanations(const v1::MicrobatchResult& row) {
  std::string all;
  for (const auto& e : row.explanations()) all += e + "\n";
  return all;
}

}  // namespace fp8audit::testing
