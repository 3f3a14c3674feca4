#include "reports/next_step.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "reports/backward_scope.h"
#include "reports/event_text.h"
#include "reports/explanations.h"
#include "reports/recompute_precision.h"

namespace fp8audit::reports {

// The releases fp8audit.te was verified on, as transformer_engine.__version__ spells them, oldest
// first: python/fp8audit/te/releases/ declares them, and tests/python/test_backports.py checks
// that this list is that one.
constexpr std::string_view kFixVerifiedOn[] = {"2.14.1", "2.16.0", "2.17.1",
                                               "2.18.0", "2.19.0", "2.20.2"};

namespace {

bool FixVerifiedOn(const std::string& version) {
  for (std::string_view v : kFixVerifiedOn) {
    if (v == version) return true;
  }
  return false;
}

std::string FixVerifiedList() {
  std::string out;
  const size_t n = std::size(kFixVerifiedOn);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " and " : ", ";
    out += kFixVerifiedOn[i];
  }
  return out;
}

// What a frozen scale asks of the job: TE keeps a module's first registration of its scales, which
// no fix of fp8audit's changes.
constexpr std::string_view kFrozenRemedy =
    "for the frozen scales, keep each module under one recipe class: evaluate under the training "
    "recipe, or with FP8 off (te.autocast(enabled=False) keeps the module's state)";

// The rank's audit took TE's own backward scheduling (TE PR #3456) from its trace.
bool OnTeScheduling(const v1::RankReport& r) {
  return r.recording().semantics_from() == kSemanticsFromScheduling;
}

// The step for the job's other violations: the fix, where it applies.
std::string FixStep(const v1::AuditReport& report) {
  std::string version;
  bool patched = false;
  bool hook = false;  // the Python hook was at work: it would have recorded TE's import
  for (const v1::RankReport& r : report.ranks()) {
    if (OnTeScheduling(r)) {  // no fix of ours
      return "next: run each microbatch's backward() calls inside `with "
             "te.quantization_backward_scope():`, entered on every rank (this Transformer Engine "
             "updates once per autograd task, its PR #3456; fp8audit.te leaves it alone)";
    }
    patched = patched || r.recording().te_patched();
    if (version.empty()) version = Printable(r.recording().te_version(), 64);
    for (const std::string& p : r.recording().probes()) hook = hook || p == "python-hook";
  }
  if (patched) {
    return "next: the fix was in force and violations remain: keep these traces and report them "
           "(`fp8audit report DIR --format html` shows each extra update in its context)";
  }
  if (version.empty() && hook) {
    return "next: no process of this job imported Transformer Engine (the Python hook saw none): "
           "nothing for --fix-te to patch; the report's explanations say where each extra "
           "update happened";
  }
  if (version.empty()) {
    return "next: Transformer Engine's version was not recorded (no Python hook in these "
           "traces): where the job runs TE from Python, rerun under the fix, `fp8audit run "
           "--fix-te -- CMD`; the report's explanations say where each extra update happened";
  }
  const bool verified = FixVerifiedOn(version);
  std::string line =
      "next: rerun under the fix, `fp8audit run --fix-te -- CMD`, or call fp8audit.te.patch() in "
      "the job before training (it patches Transformer Engine " +
      (verified ? version : FixVerifiedList()) + ")";
  if (!verified) {
    line +=
        "; this job's TE " + version + " is not one it was verified on: it refuses with one line";
  }
  return line;
}

bool IsScopeKind(const v1::Violation& v) {
  return v.kind() == v1::Violation::BACKWARD_SCOPE_OPEN ||
         v.kind() == v1::Violation::BACKWARD_SCOPE_RANKS;
}

}  // namespace

std::string NextStep(const v1::AuditReport& report) {
  if (report.outcome() != v1::AuditReport::OUTCOME_VIOLATIONS) return {};
  size_t frozen = 0;
  size_t other = 0;
  // TE PR #3456's backward scope not entered or left on every rank: its own remedy.
  bool scope = false;
  // Recomputes called with other fp8_output / fp8_grad: the job's own arguments, its own remedy.
  bool kwargs = false;
  for (const v1::Violation& v : report.violations()) scope = scope || IsScopeKind(v);
  for (const v1::RankReport& r : report.ranks()) {
    // A recompute's violation is decided from the rank's counts, not its (capped) violations.
    const v1::Recording& rec = r.recording();
    kwargs = kwargs || rec.recompute_kwargs_changes() > 0;
    if (rec.recompute_precision_changes() > rec.recompute_kwargs_changes()) ++other;
    for (const v1::Violation& v : r.violations()) {
      if (IsScopeKind(v)) {
        scope = true;
      } else if (v.kind() == v1::Violation::FROZEN_SCALE) {
        ++frozen;
      } else if (v.kind() != v1::Violation::RECOMPUTE_PRECISION) {
        ++other;
      }
    }
  }
  // On TE's own scheduling the fix step names the scope too: the scope's remedy says it all.
  const bool scheduling = std::any_of(report.ranks().begin(), report.ranks().end(), OnTeScheduling);
  std::vector<std::string> steps;
  if ((other > 0 && !(scope && scheduling)) || (frozen == 0 && !scope && !kwargs)) {
    steps.push_back(FixStep(report).substr(6));  // less its "next: "
  }
  if (scope) steps.emplace_back(kScopeRemedy);
  if (kwargs) steps.emplace_back(RecomputePrecision::kKwargsRemedy);
  if (frozen > 0) steps.emplace_back(kFrozenRemedy);
  std::string line = "next: ";
  for (size_t i = 0; i < steps.size(); ++i) line += (i > 0 ? "; " : "") + steps[i];
  return line;
}

}  // namespace fp8audit::reports
