// The Auditor's last steps: the probes compared per microbatch, the rows kept, and the report's
// totals and recording written when the trace ends (auditor.h).
#include <algorithm>
#include <string>
#include <utility>

#include "reports/auditor.h"
#include "reports/auditor_state.h"
#include "reports/event_text.h"
#include "reports/explanations.h"
#include "reports/frozen_modules.h"
#include "reports/weight_refresh.h"

namespace fp8audit::reports {

void Auditor::CompareProbes(bool words, v1::MicrobatchResult* row) {
  State& s = *state_;
  const Segment& seg = s.segments.current();
  s.probes.Add(seg.probes);
  if (seg.probes.unfused[kFwd] + seg.probes.unfused[kBwd] > 0) s.unfused.Add(row->index());
  // By source, for a trace whose recorder names its probes (an older agent's updates are all its
  // kernel probe's, the runtime's and model's their own).
  if (words && s.probe_info && seg.probes.Any()) seg.probes.WriteTo(row->mutable_by_source());
  // Compared: the probes active throughout the microbatch that are known to be at work (the
  // te-call probe once TE called it or the hook saw TE imported; the hook once it sent anything;
  // cupti whenever subscribed). Each one's count of the fused updates (the hook's unfused ones
  // no other probe can see).
  if (!s.probe_info) return;
  uint32_t compared = seg.probes_throughout;
  if (!s.te_call_heard && !s.te_loaded) compared &= ~ProbeBit(Probe::kTeCall);
  if (!s.hook_heard) compared &= ~ProbeBit(Probe::kPythonHook);
  bool disagree = false;
  for (int dir : {kFwd, kBwd}) {
    const std::string seen = seg.probes.Disagreement(compared, dir);
    if (seen.empty()) continue;
    disagree = true;
    if (words) row->add_probe_notes(ProbeNote(dir, seen, seg.count[dir]));
  }
  if (disagree) s.disagreeing.Add(row->index());
}

void Auditor::FinishRecording() {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  const bool kernel_probe = std::find(rec->probes().begin(), rec->probes().end(),
                                      ProbeName(Probe::kKernel)) != rec->probes().end();
  rec->set_kernel_launches_not_counted(s.probe_info && !kernel_probe);
  const ChosenSemantics chosen = ChooseSemantics(options_.semantics, *rec);
  rec->set_semantics(chosen.name);
  rec->set_semantics_from(chosen.from);
  if (s.probe_info && s.probes.Any()) {
    s.probes.WriteTo(rec->mutable_by_source());
  } else {
    rec->clear_by_source();
  }
  rec->set_disagreeing_microbatches(Sat32(s.disagreeing.total));
  rec->clear_notes();
  RecordingFacts facts;
  facts.other_te_version = s.other_te_version;
  facts.disagreeing = s.disagreeing;
  facts.unfused_updates = SatAdd(s.probes.unfused[kFwd], s.probes.unfused[kBwd]);
  facts.unfused = s.unfused;
  facts.split = s.split;
  facts.crowded = s.crowded;
  facts.unmarked_failures = !s.segments.markers() && report_.totals().failing_microbatches() > 0;
  AddRecordingNotes(facts, rec);
  rec->set_recomputes_checked(s.recomputes);
  rec->set_recompute_precision_changes(s.recompute_changes);
  rec->set_recompute_kwargs_changes(s.recompute_kwargs);
  if (rec->updates_not_expected()) {
    std::string recipes;
    for (const std::string& r : rec->recipes()) recipes += (recipes.empty() ? "" : ", ") + r;
    rec->add_notes("no module ran under DelayedScaling (recipes: " + recipes +
                   "), the only recipe with global state updates: none expected (0/0); " +
                   Plural(s.recomputes, "module recompute", "module recomputes") +
                   " checked against their forward's FP8 state");
  }
  rec->set_weight_refreshes(s.refreshes);
  std::string wasted = WastedRefreshesNote(s.wasted_refreshes, s.wasted_refresh_microbatches);
  if (!wasted.empty()) rec->add_notes(std::move(wasted));
  rec->set_frozen_scales(s.segments.frozen_modules().modules());
  std::string frozen = FrozenScalesNote(rec->frozen_scales());
  if (!frozen.empty()) rec->add_notes(std::move(frozen));
  if (s.unknown_events > 0) {
    rec->add_notes(Plural(s.unknown_events, "event", "events") +
                   " of kinds this fp8audit does not know (the first: kind " +
                   std::to_string(s.first_unknown_kind) +
                   ") were skipped: a newer recorder wrote this trace; a report from an fp8audit "
                   "as new as the trace's recorder reads them");
  }
  // Nothing about the recording to say: no field set (an older recorder's trace).
  if (rec->ByteSizeLong() == 0) report_.clear_recording();
}

bool Auditor::WantRow(bool fail) {
  State& s = *state_;
  const uint32_t max = options_.max_rows;
  auto* rows = report_.mutable_microbatches();
  if (max == 0) return true;
  if (!s.rows_pruned && rows->size() < static_cast<int>(max)) return true;
  if (!s.rows_pruned) {
    // More microbatches than rows: from now on only failing rows are kept.
    s.rows_pruned = true;
    int out = 0;
    for (int i = 0; i < rows->size(); ++i) {
      if (rows->Get(i).verdict() == v1::FAIL) rows->SwapElements(i, out++);
    }
    rows->DeleteSubrange(out, rows->size() - out);
  }
  return fail && rows->size() < static_cast<int>(max);
}

void Auditor::Finish() {
  State& s = *state_;
  if (s.finished) return;
  // Every microbatch still open, the parked ones too, in the order they began.
  s.segments.CloseAll(/*complete_unmarked=*/s.footer_seen && !s.damaged);
  s.finished = true;
  // Frozen scales that came after the last microbatch had closed (segmentation.h): alone, at the
  // index the next microbatch would have had, as damage and unbalanced markers are.
  for (const std::string& module : s.segments.TakeDeferredFrozen()) {
    AddViolation(FrozenScaleViolation(
        module, s.next_index,
        s.next_index == 0 ? "outside any microbatch: " : "after the last microbatch: "));
  }
  // TE PR #3456's backward scope entered and never left (reports/backward_scope.h).
  if (auto open = s.scope.OpenViolation(report_.rank(), s.footer_seen && !s.damaged)) {
    AddViolation(std::move(*open));
  }
  s.findings.WriteTo(&report_);
  s.places.WriteTo(&report_);
  SayMarkers();
  report_.mutable_totals()->set_kernel_launches(s.footer_launches > 0 ? s.footer_launches
                                                : s.launches_seen > 0 ? s.launches_seen
                                                                      : s.kernel_events);
  report_.set_verdict(s.violations > 0 ? v1::FAIL : v1::PASS);
  // Backward updates were expected and never was a backward pass seen: the microbatches' missing
  // backward updates are failures the audit cannot confirm (no backward pass, or one it cannot
  // see).
  const bool no_backward = !s.segments.backward_observed() && s.frozen_backward > 0;
  report_.set_no_backward_observed(no_backward);
  report_.set_confirmed_violations(s.violations - s.damage_violations -
                                   (no_backward ? s.frozen_backward : 0));
  FinishRecording();
  const uint64_t start = report_.header().start_unix_ns();
  if (s.footer_end_unix_ns != 0 && start != 0 && s.footer_end_unix_ns >= start) {
    report_.set_duration_ns(s.footer_end_unix_ns - start);
  } else if (s.last_event_ns > s.first_event_ns) {
    report_.set_duration_ns(s.last_event_ns - s.first_event_ns);
  }
}

}  // namespace fp8audit::reports
