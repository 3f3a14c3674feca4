#include "reports/frozen_scales.h"

#include "fp8audit/vocabulary.h"
#include "reports/event_text.h"

namespace fp8audit::reports {

uint64_t ExpectedBackward(bool backward_seen, uint64_t forward_updates, uint64_t expected) {
  return backward_seen || forward_updates > 0 ? expected : 0;
}

int FrozenDirection(const std::array<uint64_t, 2>& count, const std::array<uint64_t, 2>& expected,
                    bool complete) {
  if (!complete) return -1;
  for (int dir : {0, 1}) {
    if (count[dir] == 0 && expected[dir] > 0 && count[1 - dir] > 0) return dir;
  }
  return -1;
}

std::string FrozenExplanation(int direction, bool backward_observed) {
  const std::string dir = direction == 0 ? "forward" : "backward";
  const std::string other = direction == 0 ? "backward" : "forward";
  std::string line = "no " + dir + " update in this microbatch: " + dir +
                     " scales froze (harmful: the " + dir +
                     " amax history and scales kept their last update's values while the " + other +
                     " ones advanced)";
  if (direction == 1 && !backward_observed) {
    line += "; no backward pass has been observed in this trace so far";
  }
  return line;
}

std::string NoPythonHookProblem(const v1::RankReport& trace) {
  return Printable(trace.path(), 4096) +
         ": fp8audit's Python hook did not run in this Python process, which used Transformer "
         "Engine (python -I or -E, or a PYTHONPATH the job sets itself, leave out the hook's "
         "sitecustomize): the recompute-precision check and --fix-te did not run there, so the "
         "audit is incomplete, not a pass; start Python without -I/-E, or keep the PYTHONPATH "
         "fp8audit run gives the job in front of the job's own";
}

std::string ChildWithoutAgentProblem(const v1::RankReport& trace, const std::string& child) {
  const std::string where = Printable(trace.path(), 4096) + ": ";
  const size_t a = child.find(' ');
  const size_t b = a == std::string::npos ? a : child.find(' ', a + 1);
  const std::string why = child.substr(0, a);
  if (why == "more") {
    return where + "and " + (b == std::string::npos ? child : child.substr(a + 1, b - a - 1)) +
           " more programs started without the agent (not all are named): what they did was not "
           "audited, so the audit is incomplete, not a pass";
  }
  const std::string pid = a == std::string::npos ? "?" : child.substr(a + 1, b - a - 1);
  const std::string path = b == std::string::npos ? "?" : child.substr(b + 1);
  const std::string how =
      why == kChildWithoutAgentPrivileged
          ? "a set-user-ID or set-group-ID program: the loader ignores LD_PRELOAD for it"
          : "the environment it was given names no agent: env -i, subprocess with env={...}";
  const std::string remedy =
      why == kChildWithoutAgentPrivileged
          ? "run it without the set-ID bit"
          : "give it the job's environment (env={**os.environ, ...}), or keep "
            "LD_PRELOAD in it";
  return where + "process " + pid + " started " + path + " without the agent (" + how +
         "): what it did was not audited, so the audit is incomplete, not a pass; " + remedy;
}

std::string HookUncheckedText(const v1::RankReport& trace, const v1::HookUnchecked& unchecked) {
  const std::string& check = unchecked.check();
  const std::string what = check == "recompute" ? "the recompute-precision check"
                           : check == "refresh" ? "the weight-refresh check"
                           : check == "frozen"  ? "the frozen-scale check"
                           : check == "scope"   ? "the quantization_backward_scope check"
                           : check == "te-recompute"
                               ? "the recompute-precision, weight-refresh and frozen-scale checks"
                           : check == "te-count" ? "the Python hook's update count"
                                                 : "the Python hook's " + check;
  const std::string reason = unchecked.reason().empty() ? "?" : unchecked.reason();
  return what + " (" + check + ") could not run in process " +
         std::to_string(trace.header().pid()) + " (" + reason +
         "; its stderr says more): what it did not check may hold a mismatch, so the audit is "
         "incomplete, not a pass";
}

std::string HookUncheckedProblem(const v1::RankReport& trace, const v1::HookUnchecked& unchecked) {
  return Printable(trace.path(), 4096) + ": " + HookUncheckedText(trace, unchecked);
}

std::string FixLostExplanation(const std::string& reason) {
  const std::string why = reason == "freed-frame"
                              ? "the checkpoint frame holding it was freed without its recompute"
                          : reason == "no-owner" ? "no module was given it"
                                                 : "reason " + Printable(reason, 64);
  return "the fix lost this update (harmful): fp8audit.te's safety net found the patched "
         "ownership left this microbatch without the backward update Transformer Engine alone "
         "would have made (" +
         why + "); rerun without --fix-te, and report the job's layout";
}

std::string FrozenSuffix(int direction) {
  return direction == 0 ? ": forward scales froze" : ": backward scales froze";
}

std::string NoBackwardProblem(const v1::RankReport& trace) {
  return Printable(trace.path(), 4096) +
         ": no backward pass was observed: its microbatches have forward updates and not one "
         "backward update, and no backward activity was recorded (the agent sees a backward pass "
         "by launches and Transformer Engine calls on PyTorch's autograd threads, and by backward "
         "updates): the backward scales froze, or the job has no backward pass (evaluation, "
         "inference: --expect-backward 0); the audit is incomplete, not a pass";
}

}  // namespace fp8audit::reports
