// Explanations: why each state update beyond the expected ones happened, in words, from the
// transition that caused it (e.g. "recompute of checkpoint frame 2 (reentrant), autocast exit:
// forward update").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "state/ownership_model.h"
#include "state/scenario.h"

namespace fp8audit::state {

// Explains the updates among events[begin..] (one microbatch). Frame ids are shown relative to
// `first_frame`, the first frame id of the microbatch (numbered from 1 in forward order).
std::vector<std::string> Explain(const CompiledScenario& scenario,
                                 const std::vector<ModelEvent>& events, size_t begin,
                                 uint32_t first_frame, uint64_t expect_forward,
                                 uint64_t expect_backward, uint64_t forward_updates,
                                 uint64_t backward_updates);

}  // namespace fp8audit::state
