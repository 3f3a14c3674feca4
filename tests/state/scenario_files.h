// The example scenarios of state/scenarios/, run by name under one semantics (for the tests
// beside this file).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "state/scenario.h"
#include "state/scenario_runner.h"

namespace fp8audit::state {

inline const std::string kScenarioDir = std::string(FP8AUDIT_SOURCE_DIR) + "/state/scenarios/";

// Fails the test (and returns an empty outcome) when the file does not load.
inline RunOutcome RunScenarioFile(const std::string& name, Semantics semantics) {
  std::string error;
  auto sc = LoadAndCompileScenario(kScenarioDir + name, &error);
  EXPECT_TRUE(sc) << error;
  if (!sc) return {};
  RunOptions o;
  o.semantics = semantics;
  return RunScenario(*sc, o);
}

}  // namespace fp8audit::state
