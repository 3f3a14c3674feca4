// A microbatch in which one direction updated its FP8 state and the other did not: the other
// direction's amax history and scales kept the values of its last update (they froze), so its
// casts ran on stale scales. Decided by the Auditor as each microbatch closes; the words here are
// what every renderer shows.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "fp8audit/report.pb.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

// The backward updates a closed microbatch is expected to make: `expected` where backward activity
// was seen in it or it made forward updates (the backward pass follows them); 0 in a microbatch of
// neither (forward activity alone, no update: a forward-only pass).
uint64_t ExpectedBackward(bool backward_seen, uint64_t forward_updates, uint64_t expected);

// The direction (0 forward, 1 backward) whose scales froze in a closed microbatch, else -1: that
// direction made no update though `expected` says it should, while the other made some. An
// incomplete microbatch (the trace ended inside it) is judged on excess updates only: none froze.
int FrozenDirection(const std::array<uint64_t, 2>& count, const std::array<uint64_t, 2>& expected,
                    bool complete);

// The explanation of a frozen direction, e.g. "no backward update in this microbatch: backward
// scales froze (...)". `backward_observed`: the trace had shown a backward pass before.
std::string FrozenExplanation(int direction, bool backward_observed);

// The problem line of a trace whose Python process ran TE without the Python hook
// (RankReport.python_hook_absent), naming its path and the remedy.
std::string NoPythonHookProblem(const v1::RankReport& trace);

// The problem line of a program a process of `trace` started without the agent (one entry of
// RankReport.children_without_agent: "<why> <pid> <path>"), naming it, why and the remedy.
std::string ChildWithoutAgentProblem(const v1::RankReport& trace, const std::string& child);

// What a check of the Python hook that gave up in the trace's process (RankReport.hook_unchecked)
// amounts to, naming the check, why and the process; the problem line: the same after the path.
std::string HookUncheckedText(const v1::RankReport& trace, const v1::HookUnchecked& unchecked);
std::string HookUncheckedProblem(const v1::RankReport& trace, const v1::HookUnchecked& unchecked);

// The explanation of a microbatch in which fp8audit.te's safety net said the fix lost the backward
// update (FIX_LOST_UPDATE; `reason`: its detail, "freed-frame" or "no-owner").
std::string FixLostExplanation(const std::string& reason);

// What the count violation's message adds: ": backward scales froze".
std::string FrozenSuffix(int direction);

// The problem line of a trace in which no backward pass was observed
// (RankReport.no_backward_observed), naming its path.
std::string NoBackwardProblem(const v1::RankReport& trace);

}  // namespace fp8audit::reports
