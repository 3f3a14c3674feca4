#include "reports/auditor.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8audit/nvtx_grammar.h"
#include "reports/auditor_state.h"
#include "reports/event_text.h"
#include "reports/explanations.h"
#include "reports/extra_places.h"
#include "reports/findings.h"
#include "reports/frozen_modules.h"
#include "reports/frozen_scales.h"
#include "reports/probe_tally.h"
#include "reports/segmentation.h"
#include "reports/weight_refresh.h"

namespace fp8audit::reports {
namespace {

constexpr size_t kMaxProbeChanges = 8;  // PROBES details kept

}  // namespace

Auditor::Auditor(Expectation expect)
    : Auditor([expect] {
        AuditorOptions o;
        o.expect = expect;
        return o;
      }()) {}

Auditor::Auditor(const AuditorOptions& options)
    : options_(options), state_(std::make_unique<State>(this)) {
  report_.set_rank(-1);
  state_->default_expect = options_.expect;
  if (options_.max_context_events < 2) options_.max_context_events = 2;
}

Auditor::~Auditor() = default;

void Auditor::OnRecord(const v1::TraceRecord& record) {
  switch (record.record_case()) {
    case v1::TraceRecord::kHeader:
      OnHeader(record.header());
      break;
    case v1::TraceRecord::kEvent:
      OnEvent(record.event());
      break;
    case v1::TraceRecord::kFooter:
      OnFooter(record.footer());
      break;
    default:
      break;
  }
}

void Auditor::OnHeader(const v1::TraceHeader& header) {
  State& s = *state_;
  if (s.header_seen) return;
  s.header_seen = true;
  v1::TraceHeader* h = report_.mutable_header();
  h->CopyFrom(header);
  BoundHeaderStrings(h);
  report_.set_rank(header.rank());
  s.segments.set_markers_configured(header.markers() == "nvtx");
  // The agent's probes: its mode and those active from the start.
  v1::Recording* rec = report_.mutable_recording();
  // By its one name (an older trace's "te" or "cupti" too); "": not recorded.
  const std::optional<ProbeMode> mode =
      header.probe_mode().empty() ? std::nullopt : ParseProbeMode(header.probe_mode());
  rec->set_probe_mode(mode ? std::string(ProbeModeName(*mode))
                           : Printable(header.probe_mode(), 32));
  s.probe_info = !header.probe_mode().empty() || header.probes_size() > 0;
  s.segments.SetActiveProbes(s.probes_active.Set(header.probes(), rec));
}

void Auditor::SayMarkers() {
  // The agent's words ("nvtx" when told to expect markers, else "threads"; an older writer none)
  // are replaced by what segmented this trace; another writer's own word (e.g. "model") stays.
  const State& s = *state_;
  if (!s.header_seen) return;
  const std::string& said = report_.header().markers();
  if (said.empty() || said == "nvtx" || said == "threads") {
    report_.mutable_header()->set_markers(s.segments.markers() ? "nvtx" : "threads");
  }
}

void Auditor::OnFooter(const v1::TraceFooter& footer) {
  state_->footer_seen = true;
  state_->footer_launches = footer.kernel_launches();
  state_->footer_end_unix_ns = footer.end_unix_ns();
  if (footer.dropped() > 0) {
    v1::Violation v;
    v.set_kind(v1::Violation::TRACE_DAMAGED);
    v.set_microbatch(state_->next_index);
    v.set_message("the recorder dropped " + Plural(footer.dropped(), "event", "events") +
                  " (its buffer was full): counts may be too low, the audit is incomplete");
    AddViolation(std::move(v));
  }
}

void Auditor::OnDamage(const std::string& what) {
  State& s = *state_;
  if (s.damaged) return;
  s.damaged = true;
  report_.set_damage(what);
  v1::Violation v;
  v.set_kind(v1::Violation::TRACE_DAMAGED);
  v.set_microbatch(s.next_index);
  v.set_message("trace damaged at " + what + "; the audit covers only the whole records before it");
  AddViolation(std::move(v));
}

uint64_t Auditor::OnMissingFooter() {
  State& s = *state_;
  // The open segments that will be microbatches (see Close): ended ones are whole.
  uint64_t ended = 0, unfinished = 0;
  s.segments.CountOpen(&ended, &unfinished);
  const uint64_t whole = s.next_index + ended;
  const std::string what = MissingFooterText(s.next_index, ended, unfinished);
  if (!s.damaged) {
    s.damaged = true;
    report_.set_damage(what);
    v1::Violation v;
    v.set_kind(v1::Violation::TRACE_DAMAGED);
    v.set_microbatch(s.next_index);
    v.set_message(what + "; the audit is incomplete");
    AddViolation(std::move(v));
  }
  return whole;
}

void Auditor::AddViolation(v1::Violation v) {
  State& s = *state_;
  v.set_rank(report_.rank());
  ++s.violations;
  if (v.kind() == v1::Violation::TRACE_DAMAGED) ++s.damage_violations;
  if (on_violation) on_violation(v);
  if (KeepsViolation(v.kind())) *report_.add_violations() = std::move(v);
}

bool Auditor::KeepsViolation(v1::Violation::Kind kind) const {
  // Damage is always kept: it decides whether the audit is complete.
  return options_.max_violations == 0 || kind == v1::Violation::TRACE_DAMAGED ||
         report_.violations_size() < static_cast<int>(options_.max_violations);
}

void Auditor::Unbalanced(const v1::Event& event, Unbalance what) {
  v1::Violation v;
  v.set_kind(v1::Violation::UNBALANCED);
  v.set_microbatch(state_->next_index);
  v.set_message(UnbalancedMessage(what, state_->next_index));
  v1::Event* e = v.add_context();
  e->CopyFrom(event);
  BoundEventStrings(e);
  AddViolation(std::move(v));
}

void Auditor::Fact(const v1::Event& event) {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  if (event.kind() == v1::PYTHON_HOOK_ABSENT) {
    report_.set_python_hook_absent(true);
    return;
  }
  if (event.kind() == v1::CHILD_WITHOUT_AGENT) {
    if (report_.children_without_agent_size() < 64) {
      report_.add_children_without_agent(Printable(event.detail(), 160));
    }
    return;
  }
  if (event.kind() == v1::RECIPE) {
    Recipe(event);
    return;
  }
  if (event.kind() == v1::HOOK_UNCHECKED) {
    Unchecked(event);
    return;
  }
  if (event.kind() == v1::PROBES) {
    s.probe_info = true;
    s.segments.SetActiveProbes(s.probes_active.Set(event.probes(), rec));
    if (rec->probe_changes_size() < static_cast<int>(kMaxProbeChanges)) {
      rec->add_probe_changes(Printable(event.detail(), 256));
    }
    return;
  }
  // TE_VERSION, TE_PATCHED: the Python hook saw TE imported (and patched).
  s.hook_heard = true;
  s.te_loaded = true;
  const std::string version = Printable(event.te_version(), 64);
  if (rec->te_version().empty()) {
    rec->set_te_version(version);
  } else if (!version.empty() && version != rec->te_version() && s.other_te_version.empty()) {
    s.other_te_version = version;
  }
  if (event.kind() == v1::TE_PATCHED) {
    rec->set_te_patched(true);
    rec->set_patched_semantics(Printable(event.semantics(), 32));
  } else if (!event.semantics().empty() && rec->scheduling_semantics().empty()) {
    rec->set_scheduling_semantics(Printable(event.semantics(), 32));
  }
}

void Auditor::Recipe(const v1::Event& event) {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  const std::string name = Printable(event.detail(), 64);
  if (rec->recipes_size() < 8 &&
      std::find(rec->recipes().begin(), rec->recipes().end(), name) == rec->recipes().end()) {
    rec->add_recipes(name);
  }
  if (name == nvtx::kDelayedScalingRecipe) s.delayed_scaling = true;
  if (options_.expect.given) return;
  // Only DelayedScaling has global state updates: while no module ran under it, none is expected.
  const bool none = !s.delayed_scaling;
  rec->set_updates_not_expected(none);
  options_.expect = none ? Expectation{0, 0, false} : s.default_expect;
}

void Auditor::Unchecked(const v1::Event& event) {
  const std::string check = Printable(event.context(), 32);
  for (const v1::HookUnchecked& u : report_.hook_unchecked()) {
    if (u.check() == check) return;  // one per check: the first reason says why
  }
  if (report_.hook_unchecked_size() >= 16) return;
  v1::HookUnchecked* u = report_.add_hook_unchecked();
  u->set_check(check);
  u->set_reason(Printable(event.detail(), 64));
}

void Auditor::CrossCheck(const v1::Event& event) {
  State& s = *state_;
  Heard(event.source());
  Segment& seg = s.segments.current();
  if (!seg.open) return;  // outside any microbatch: nothing to compare it with
  bool inferred = false;
  const int dir = Direction(event, v1::CROSSCHECK_UPDATE_FORWARD, v1::CROSSCHECK_UPDATE_BACKWARD,
                            s.segments.in_backward(), &inferred);
  seg.probes.CrossCheck(event.source(), dir, event.count() == 0 ? 1 : event.count());
}

void Auditor::OnEvent(const v1::Event& event) {
  State& s = *state_;
  if (s.finished) return;
  Dispatch(event);
  // The event belongs to the segment open after it (a segment it closed is not it).
  s.segments.Stamp(event.timestamp_ns());
}

void Auditor::Dispatch(const v1::Event& event) {
  State& s = *state_;
  v1::Totals* totals = report_.mutable_totals();
  totals->set_events(totals->events() + 1);
  if (event.source() == v1::KERNEL) ++s.kernel_events;
  if (event.timestamp_ns() != 0) {
    if (s.first_event_ns == 0) s.first_event_ns = event.timestamp_ns();
    s.last_event_ns = std::max(s.last_event_ns, event.timestamp_ns());
  }
  s.launches_seen = std::max(s.launches_seen, event.kernel_launches());
  const v1::EventKind kind = event.kind();
  if (!v1::EventKind_IsValid(kind)) {  // a newer recorder's: skipped, and said once (Finish)
    if (s.unknown_events++ == 0) s.first_unknown_kind = static_cast<int>(kind);
    return;
  }

  Segmenter& segments = s.segments;
  segments.Advance(event);

  // Neither a pass's activity nor an update: they open, close and count nothing.
  if (IsFact(kind)) {
    Fact(event);
    segments.Remember(event);
    return;
  }
  if (IsCrossCheck(kind)) {
    CrossCheck(event);
    return;
  }
  // Where the job entered it: the call-site mark before the entry's, which Assign below replaces.
  if (kind == v1::BACKWARD_SCOPE) s.scope.On(event, s.next_index, segments.context().site);
  const bool markers = segments.markers();
  int dir = kFwd;
  bool inferred = false;
  const bool update = segments.Assign(event, options_.expect.forward, &dir, &inferred);
  if (!markers && segments.markers()) SayMarkers();  // the first marker
  if (update) Count(event, dir, inferred);
}

void Auditor::Count(const v1::Event& event, int dir, bool inferred) {
  State& s = *state_;
  const Segmenter& segments = s.segments;
  Segment& seg = s.segments.current();
  const uint64_t n = event.count() == 0 ? 1 : event.count();
  if (segments.seq() == seg.start_seq) seg.start_dir = dir;
  const uint64_t first = SatAdd(seg.count[dir], 1);
  const bool recompute = segments.context().InRecompute();
  seg.Tally(event, dir, n, inferred, segments.context());
  Heard(event.source());

  // The stored copies say which direction the update was counted in.
  const v1::Pass counted = dir == kFwd ? v1::FORWARD : v1::BACKWARD;
  auto store = [&](v1::Event* copy) {
    copy->CopyFrom(event);
    BoundEventStrings(copy);
    if (event.kind() == v1::UPDATE && copy->pass() == v1::PASS_UNSPECIFIED) copy->set_pass(counted);
  };
  // The context log, the update events and the notes only ever reach the report as a failing
  // microbatch's full detail: once max_detailed failing microbatches had theirs, none is kept.
  const bool keep_detail = s.detailed < options_.max_detailed;
  if (keep_detail) {
    v1::Event* stored = seg.Log(dir, segments.seq(), segments.ring(), options_.max_context_events);
    if (stored != nullptr) store(stored);
    if (seg.updates.size() < options_.max_context_events) {
      v1::Event* copy = seg.updates.Push();
      if (stored != nullptr) {
        copy->CopyFrom(*stored);
      } else {
        store(copy);
      }
    } else {
      ++seg.updates_dropped;
    }
  }

  const uint64_t expected = dir == kFwd ? options_.expect.forward : options_.expect.backward;
  const bool extra = seg.count[dir] > expected;
  if (extra) {
    const Context& ctx = segments.context();
    s.places.Add(ctx.module.empty() ? ctx.site : ctx.module, dir,
                 std::min(n, seg.count[dir] - expected), recompute,
                 EffectOf(seg.module_ran[dir], segments.ModulesVisible(dir)));
  }
  seg.module_ran[dir] = false;
  // Where an extra update happened; consecutive extra updates in the same place share one note.
  std::string where;
  if (extra && (keep_detail || on_update)) {
    where = Where(segments.context(), event, recompute, seg.ended, inferred);
  }
  if (on_update) {
    CountedUpdate u;
    u.event = &event;
    u.direction = counted;
    u.inferred = inferred;
    u.microbatch = s.next_index;  // a segment with an update is always a microbatch
    u.first = first;
    u.last = seg.count[dir];
    u.expected = expected;
    u.where = where;
    on_update(u);
  }
  if (!extra) return;
  if (keep_detail) {
    seg.AddNote(dir, std::max(first, expected + 1), n, event.timestamp_ns(), std::move(where),
                options_.max_explanations);
  }
  if (!seg.excess_reported[dir]) {
    seg.excess_reported[dir] = true;
    if (on_excess) {
      v1::Event copy;
      store(&copy);
      on_excess(copy, counted, seg.count[dir]);
    }
  }
}

void Auditor::Heard(v1::Source source) {
  State& s = *state_;
  if (source == v1::TE_CALL) s.te_call_heard = true;
  if (source == v1::PYTHON_HOOK) s.hook_heard = true;
}

void Auditor::Close(bool complete) {
  State& s = *state_;
  Segment& seg = s.segments.current();
  if (!seg.open) return;
  // Not a microbatch: nothing happened in it, or it precedes the markers the recorder was told to
  // expect and holds no update (warm-up, set-up).
  if (!seg.IsMicrobatch(s.segments.markers_configured())) {
    s.segments.Defer(std::move(seg.frozen));  // its frozen scales are the next microbatch's
    seg.Reset();
    return;
  }
  v1::MicrobatchResult row;
  row.set_index(s.next_index);
  if (s.next_index < std::numeric_limits<uint32_t>::max()) ++s.next_index;
  row.set_step(seg.step);
  if (seg.keyed) row.set_microbatch_id(seg.key);
  const std::array<uint64_t, 2> expected = {
      options_.expect.forward,
      ExpectedBackward(seg.backward_seen, seg.count[kFwd], options_.expect.backward)};
  row.set_forward_updates(Sat32(seg.count[kFwd]));
  row.set_backward_updates(Sat32(seg.count[kBwd]));
  row.set_expected_forward(static_cast<uint32_t>(expected[kFwd]));
  row.set_expected_backward(static_cast<uint32_t>(expected[kBwd]));
  std::array<bool, 2> wrong{};
  for (int dir : {kFwd, kBwd}) {
    wrong[dir] = complete ? seg.count[dir] != expected[dir] : seg.count[dir] > expected[dir];
  }
  const RecomputePrecision& recompute = seg.recompute;
  row.set_recomputes(Sat32(recompute.recomputes()));
  s.recomputes = SatAdd(s.recomputes, recompute.recomputes());
  row.set_recompute_precision_changes(Sat32(recompute.changes()));
  row.set_recompute_kwargs_changes(Sat32(recompute.kwargs_changes()));
  s.recompute_changes = SatAdd(s.recompute_changes, recompute.changes());
  s.recompute_kwargs = SatAdd(s.recompute_kwargs, recompute.kwargs_changes());
  const WeightRefresh& refresh = seg.refresh;
  row.set_weight_refreshes(Sat32(refresh.refreshes()));
  row.set_weight_refreshes_harmful(Sat32(refresh.harmful()));
  row.set_backward_scope_exits(seg.scope_exits);
  s.refreshes = SatAdd(s.refreshes, refresh.refreshes());
  if (refresh.wasted() > 0) {
    s.wasted_refreshes = SatAdd(s.wasted_refreshes, refresh.wasted());
    ++s.wasted_refresh_microbatches;
  }
  const bool fail = wrong[kFwd] || wrong[kBwd] || recompute.changes() > 0 ||
                    refresh.harmful() > 0 || seg.fix_lost > 0 || !seg.frozen.empty();
  const Apart apart = Unattributable(seg, fail);
  if (apart != Apart::kNone) (apart == Apart::kSplit ? s.split : s.crowded).Add(row.index());
  const int frozen = FrozenDirection(seg.count, expected, complete);
  row.set_verdict(fail ? v1::FAIL : v1::PASS);
  const bool detail = fail && s.detailed < options_.max_detailed;
  if (detail) ++s.detailed;
  // Words are built only for a row that is kept or handed to on_microbatch (the common passing
  // row beyond max_rows is neither), and likewise for violations.
  const bool keep_row = WantRow(fail);
  const bool words = keep_row || on_microbatch || on_microbatch_span;

  if (words) {
    AddExplanations(seg, options_.expect, complete, expected, wrong, frozen,
                    s.segments.backward_observed(), detail, &row);
    const bool extra = seg.count[kFwd] > expected[kFwd] || seg.count[kBwd] > expected[kBwd];
    if (extra) {
      std::string line = SemanticsLine(ChooseSemantics(options_.semantics, report_.recording()),
                                       report_.recording().te_version());
      if (!line.empty()) row.add_explanations(std::move(line));
    }
    if (recompute.changes() > 0) row.add_explanations(recompute.Explanation());
    if (refresh.wasted() > 0) row.add_explanations(refresh.WastedExplanation());
    if (seg.fix_lost > 0) row.add_explanations(FixLostExplanation(seg.fix_lost_reason));
    if (apart != Apart::kNone) row.add_explanations(ApartExplanation(apart));
  }
  CompareProbes(words, &row);
  if (detail) {
    for (v1::Event& e : seg.updates) *row.add_updates() = std::move(e);
  }

  for (int dir : {kFwd, kBwd}) {
    if (!wrong[dir]) continue;
    const auto kind = dir == kFwd ? v1::Violation::FORWARD_COUNT : v1::Violation::BACKWARD_COUNT;
    if (dir == kBwd && frozen == kBwd) ++s.frozen_backward;
    std::string cause = CountCause(seg.count[dir], expected[dir], dir, complete, dir == frozen);
    const auto explained = ExplanationsOf(row.explanations(), dir);
    s.findings.Add(kind, row.index(), row.step(), cause, words ? &explained : nullptr);
    if (!on_violation && !KeepsViolation(kind)) {
      ++s.violations;  // counted, not kept
      continue;
    }
    v1::Violation v;
    v.set_kind(kind);
    v.set_microbatch(row.index());
    v.set_message(RowLabel(row) + cause);
    v.set_cause(std::move(cause));
    if (detail) {
      if (seg.start_dir != dir) *v.add_context() = seg.start;
      for (v1::Event& e : seg.log[dir]) *v.add_context() = std::move(e);
    }
    AddViolation(std::move(v));
  }

  // A recompute problem of the microbatch: its finding (with `why`, may be null), its violation.
  auto recompute_violation = [&](v1::Violation::Kind kind, std::string cause,
                                 const google::protobuf::RepeatedPtrField<std::string>* why) {
    s.findings.Add(kind, row.index(), row.step(), cause, why);
    if (!on_violation && !KeepsViolation(kind)) {
      ++s.violations;  // counted, not kept
      return;
    }
    v1::Violation v;
    v.set_kind(kind);
    v.set_microbatch(row.index());
    v.set_message(RowLabel(row) + cause);
    v.set_cause(std::move(cause));
    AddViolation(std::move(v));
  };
  if (recompute.changes() > 0) {
    recompute_violation(v1::Violation::RECOMPUTE_PRECISION, recompute.ViolationMessage(), nullptr);
  }
  if (refresh.harmful() > 0) {  // its explanation goes with its finding, not the row's others
    google::protobuf::RepeatedPtrField<std::string> why;
    if (words) *why.Add() = refresh.Explanation();
    recompute_violation(v1::Violation::RECOMPUTE_WEIGHT_REFRESH, refresh.ViolationMessage(), &why);
  }
  // Its frozen scales, one violation per module: each stands alone (a module's comes once in the
  // run, there is nothing for a finding to collapse).
  for (const std::string& module : seg.frozen) {
    AddViolation(FrozenScaleViolation(module, row.index(), RowLabel(row)));
  }

  v1::Totals* totals = report_.mutable_totals();
  totals->set_microbatches(totals->microbatches() + 1);
  totals->set_forward_updates(SatAdd(totals->forward_updates(), seg.count[kFwd]));
  totals->set_backward_updates(SatAdd(totals->backward_updates(), seg.count[kBwd]));
  if (fail) totals->set_failing_microbatches(totals->failing_microbatches() + 1);

  if (on_microbatch) on_microbatch(row);
  if (on_microbatch_span) {
    on_microbatch_span(row, MicrobatchSpan{seg.first_ns, seg.last_ns, seg.backward_seen});
  }
  const bool fold = options_.max_rows == 0 && options_.fold_beyond > 0 &&
                    totals->microbatches() > options_.fold_beyond;
  if (!keep_row || fold) {
    if (!FoldIntoLastRow(row) && keep_row) *report_.add_microbatches() = std::move(row);
  } else {
    *report_.add_microbatches() = std::move(row);
  }
  seg.Reset();
}

// A row beyond max_rows (or fold_beyond) that continues the last kept row with the same outcome
// extends it (through_index), so a long run of identical rows stays one row with its true extent.
// Whether it did.
bool Auditor::FoldIntoLastRow(const v1::MicrobatchResult& row) {
  auto* rows = report_.mutable_microbatches();
  if (rows->empty()) return false;
  v1::MicrobatchResult& last = *rows->Mutable(rows->size() - 1);
  const uint32_t last_index = last.has_through_index() ? last.through_index() : last.index();
  if (row.index() != last_index + 1 || row.forward_updates() != last.forward_updates() ||
      row.backward_updates() != last.backward_updates() ||
      row.expected_forward() != last.expected_forward() ||
      row.expected_backward() != last.expected_backward() || row.verdict() != last.verdict() ||
      row.recomputes() != last.recomputes() ||
      row.recompute_precision_changes() != last.recompute_precision_changes() ||
      row.recompute_kwargs_changes() != last.recompute_kwargs_changes() ||
      row.weight_refreshes() != last.weight_refreshes() ||
      row.weight_refreshes_harmful() != last.weight_refreshes_harmful() ||
      row.backward_scope_exits() != last.backward_scope_exits() ||
      row.harmful_forward() != last.harmful_forward() ||
      row.harmful_backward() != last.harmful_backward() ||
      row.wasted_forward() != last.wasted_forward() ||
      row.wasted_backward() != last.wasted_backward() || row.probe_notes_size() != 0 ||
      last.probe_notes_size() != 0 ||
      row.by_source().SerializeAsString() != last.by_source().SerializeAsString()) {
    return false;
  }
  last.set_through_index(row.index());
  last.set_through_step(row.step());
  return true;
}

}  // namespace fp8audit::reports
