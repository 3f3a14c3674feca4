#include "reports/next_step.h"

#include <iterator>
#include <string_view>

#include "reports/event_text.h"

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

// The step for the job's other violations: the fix, where it applies.
std::string FixStep(const v1::AuditReport& report) {
  std::string version;
  bool patched = false;
  bool hook = false;  // the Python hook was at work: it would have recorded TE's import
  for (const v1::RankReport& r : report.ranks()) {
    if (r.recording().semantics_from() == "scheduling") {  // TE's own (PR #3456): no fix of ours
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

}  // namespace

std::string NextStep(const v1::AuditReport& report) {
  if (report.outcome() != v1::AuditReport::OUTCOME_VIOLATIONS) return {};
  size_t frozen = 0;
  size_t other = 0;
  for (const v1::RankReport& r : report.ranks()) {
    for (const v1::Violation& v : r.violations()) {
      ++(v.kind() == v1::Violation::FROZEN_SCALE ? frozen : other);
    }
  }
  if (frozen == 0) return FixStep(report);
  if (other == 0) return "next: " + std::string(kFrozenRemedy);
  return FixStep(report) + "; " + std::string(kFrozenRemedy);
}

}  // namespace fp8audit::reports
