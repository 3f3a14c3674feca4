#include "reports/auditor.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <utility>
#include <vector>

#include "reports/event_text.h"
#include "reports/findings.h"
#include "reports/frozen_scales.h"
#include "reports/recompute_precision.h"
#include "state/semantics.h"

namespace fp8audit::reports {
namespace {

constexpr int kFwd = 0;
constexpr int kBwd = 1;
constexpr size_t kRing = 4;            // context events remembered before each update
constexpr size_t kMaxOpenFrames = 64;  // checkpoint frames tracked at once
constexpr size_t kMaxHeaderStrings = 64;
constexpr size_t kMaxParked = 256;  // other threads' microbatches open at once

uint64_t SatAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint32_t Sat32(uint64_t v) {
  return v > std::numeric_limits<uint32_t>::max() ? std::numeric_limits<uint32_t>::max()
                                                  : static_cast<uint32_t>(v);
}

bool IsUpdate(v1::EventKind kind) {
  return kind == v1::UPDATE_FORWARD || kind == v1::UPDATE_BACKWARD || kind == v1::UPDATE;
}

// A second probe's view of an update another probe recorded: tallied, never counted.
bool IsCrossCheck(v1::EventKind kind) {
  return kind == v1::CROSSCHECK_UPDATE_FORWARD || kind == v1::CROSSCHECK_UPDATE_BACKWARD ||
         kind == v1::CROSSCHECK_UPDATE;
}

// Facts about the recording (TE's version and patch, probe changes): no activity of a pass.
bool IsFact(v1::EventKind kind) {
  return kind == v1::TE_VERSION || kind == v1::TE_PATCHED || kind == v1::PROBES;
}

const char* DirWord(int dir) { return dir == kFwd ? "forward" : "backward"; }

// Sources an update is tallied by (SourceTallies), and the probe each one is.
constexpr int kKernel = 0;
constexpr int kTeCall = 1;
constexpr int kHook = 2;
constexpr int kOther = 3;
constexpr int kSources = 4;
int SourceIndex(v1::Source source) {
  switch (source) {
    case v1::KERNEL:
      return kKernel;
    case v1::TE_CALL:
      return kTeCall;
    case v1::PYTHON_HOOK:
      return kHook;
    default:
      return kOther;
  }
}
// The agent's probe names (the header's and PROBES events' `probes`), by source.
constexpr std::array<std::string_view, 3> kProbeName = {"cupti", "te-call", "python-hook"};
// Probes compared with one another, in the order notes list them.
constexpr std::array<int, 3> kCompared = {kTeCall, kKernel, kHook};
uint32_t ProbeBit(std::string_view name) {
  for (int i = 0; i < 3; ++i) {
    if (name == kProbeName[i]) return 1u << i;
  }
  return 0;
}
constexpr size_t kMaxProbeNames = 16;   // probe names kept from a trace
constexpr size_t kMaxProbeChanges = 8;  // PROBES details kept
constexpr size_t kMaxListed = 5;        // microbatches named in a note

// The unfused updates a Python hook range names ("... unfused=U"), at most `count`.
uint64_t HookUnfused(std::string_view detail, uint64_t count) {
  constexpr std::string_view kKey = " unfused=";
  const size_t at = detail.find(kKey);
  if (at == std::string_view::npos) return 0;
  uint64_t u = 0;
  const char* begin = detail.data() + at + kKey.size();
  const auto [end, ec] = std::from_chars(begin, detail.data() + detail.size(), u);
  if (ec != std::errc() || end == begin) return 0;
  return std::min(u, count);
}

void AppendNumber(std::string* out, uint64_t n) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), n).ptr;
  out->append(buf, static_cast<size_t>(end - buf));
}

// "N forward update(s)".
void AppendUpdates(std::string* out, uint64_t n, int dir) {
  AppendNumber(out, n);
  *out += ' ';
  *out += DirWord(dir);
  *out += n == 1 ? " update" : " updates";
}

struct Frame {
  uint64_t id = 0;
  uint32_t phase = 0;
  v1::CheckpointKind kind = v1::CHECKPOINT_KIND_UNSPECIFIED;
};

// Extra updates numbered first..last (in one direction), all in the same place.
struct Note {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t launches = 0;
  uint64_t launch_count = 0;  // the first launch's count (a graph launch may carry several)
  uint64_t timestamp_ns = 0;
  std::string where;
};

// Events kept for one microbatch's detail. Their storage is reused by the next microbatch
// (CopyFrom into a kept event reuses its strings), so keeping them allocates nothing once warm.
class EventList {
 public:
  size_t size() const { return size_; }
  void Clear() { size_ = 0; }
  v1::Event* Push() {
    if (size_ == items_.size()) items_.emplace_back();
    return &items_[size_++];
  }
  v1::Event* begin() { return items_.data(); }
  v1::Event* end() { return items_.data() + size_; }

 private:
  std::vector<v1::Event> items_;
  size_t size_ = 0;
};

// The microbatch being built.
struct Segment {
  bool open = false;
  bool marked = false;  // opened by a MICROBATCH_BEGIN
  uint64_t owner = 0;   // that BEGIN's thread (0: none recorded)
  bool ended = false;   // its MICROBATCH_END was seen
  // Its ranges name a logical microbatch (MICROBATCH_BEGIN's microbatch_id): every range with that
  // id resumes it (see Resume), also after other microbatches' ranges.
  bool keyed = false;
  uint64_t key = 0;
  bool part_backward = false;    // backward activity since its latest range began
  uint32_t backward_passes = 0;  // BACKWARD_BEGINs in it
  bool forward_seen = false;     // forward activity
  bool backward_seen = false;    // backward activity
  uint32_t step = 0;
  uint64_t start_seq = 0;
  int start_dir = -1;  // when the opening event is an update: its direction (logged with it)
  v1::Event start;     // the event that opened it; context times are relative to it
  std::array<uint64_t, 2> count{};
  std::array<uint64_t, 2> in_recompute{};
  std::array<uint64_t, 2> in_checkpoint{};  // original (phase 1) checkpointed forward
  std::array<uint64_t, 2> after_end{};
  std::array<bool, 2> excess_reported{};
  uint64_t inferred = 0;  // UPDATE events counted by pass boundaries
  // Per direction: update events with the context events before each, capped. Like `updates` and
  // the notes, kept only while failing microbatches can still be given full detail.
  std::array<EventList, 2> log;
  std::array<uint64_t, 2> logged_seq{};
  std::array<uint64_t, 2> log_dropped{};
  std::array<std::vector<Note>, 2> notes;   // where extra updates happened, capped
  std::array<uint64_t, 2> notes_dropped{};  // extra updates beyond the capped notes
  EventList updates;
  uint64_t updates_dropped = 0;
  uint64_t first_ns = 0;  // earliest and latest event timestamps in it (MicrobatchSpan)
  uint64_t last_ns = 0;
  // What each source saw, per direction: counted updates and cross-checks; the Python hook's
  // counted updates on TE's unfused path.
  std::array<std::array<uint64_t, 2>, kSources> counted_by{};
  std::array<std::array<uint64_t, 2>, kSources> cross_by{};
  std::array<uint64_t, 2> unfused{};
  uint32_t probes_throughout = 0;  // probe bits active from its opening to now
  RecomputePrecision recompute;    // the modules recomputed in its backward (MODULE_RECOMPUTE)

  // Closed, ready for the next microbatch; the kept events' storage stays.
  void Reset() {
    std::array<EventList, 2> kept_log = std::move(log);
    EventList kept_updates = std::move(updates);
    v1::Event kept_start = std::move(start);
    *this = Segment();
    log = std::move(kept_log);
    updates = std::move(kept_updates);
    start = std::move(kept_start);
    for (EventList& l : log) l.Clear();
    updates.Clear();
  }

  bool HasActivity() const {
    return count[kFwd] > 0 || count[kBwd] > 0 || forward_seen || backward_seen;
  }
};

// A closed microbatch's explanations: why it is judged as it is and, for a failing one, where its
// extra updates happened (with `detail`, each place).
void AddExplanations(const Segment& seg, const Expectation& expect, bool complete,
                     const std::array<uint64_t, 2>& expected, const std::array<bool, 2>& wrong,
                     int frozen, bool backward_observed, bool detail, v1::MicrobatchResult* row) {
  if (!complete) {
    row->add_explanations(
        "incomplete: the trace ended inside this microbatch; only excess updates are judged");
  }
  if (expected[kBwd] == 0 && expect.backward > 0) {
    row->add_explanations(
        "no backward pass was seen: judged as forward-only (backward expected 0)");
  }
  if (seg.inferred > 0) {
    row->add_explanations(Plural(seg.inferred, "update", "updates") +
                          " recorded without a direction counted by pass boundaries");
  }
  for (int dir : {kFwd, kBwd}) {
    if (!wrong[dir]) continue;
    if (dir == frozen) row->add_explanations(FrozenExplanation(dir, backward_observed));
    const uint64_t c = seg.count[dir];
    std::string line;
    AppendUpdates(&line, c, dir);
    line += ", expected ";
    AppendNumber(&line, expected[dir]);
    if (c > 0) {
      const uint64_t outside = c - std::min(c, seg.in_recompute[dir] + seg.in_checkpoint[dir]);
      line += ": ";
      AppendNumber(&line, seg.in_recompute[dir]);
      line += " during checkpoint recompute, ";
      AppendNumber(&line, seg.in_checkpoint[dir]);
      line += " in checkpointed original forward, ";
      AppendNumber(&line, outside);
      line += " outside checkpoints";
      if (seg.after_end[dir] > 0) {
        line += "; ";
        AppendNumber(&line, seg.after_end[dir]);
        line += " after the end marker";
      }
    }
    row->add_explanations(std::move(line));
    if (detail) {
      for (const Note& note : seg.notes[dir]) {
        std::string line = std::string(DirWord(dir)) + " update";
        if (note.last > note.first) {
          line += "s " + std::to_string(note.first) + "-" + std::to_string(note.last);
          if (note.launches == 1)
            line += " (one launch of " + std::to_string(note.launch_count) + ")";
        } else {
          line += " " + std::to_string(note.first);
        }
        line += ", expected " + std::to_string(expected[dir]) + ", " +
                (note.last > note.first ? "from" : "at") +
                " t=" + Millis(note.timestamp_ns, seg.start.timestamp_ns()) + "ms: " + note.where;
        row->add_explanations(std::move(line));
      }
      if (seg.notes_dropped[dir] > 0) {
        row->add_explanations("... and " + std::to_string(seg.notes_dropped[dir]) + " more extra " +
                              DirWord(dir) + " updates");
      }
    }
  }
}

constexpr char kRemedy[] =
    "name each microbatch in its ranges, around its forward and its backward alike (`with "
    "fp8audit.microbatch(id=i):`; Megatron-core: `fp8audit.megatron.mark_microbatches()`)";
constexpr char kSplitRow[] =
    "this range holds a backward pass without its forward (microbatch ranges without ids around "
    "the passes of a pipeline schedule): its updates cannot be attributed to a logical microbatch";
constexpr char kCrowdedRow[] =
    "this cut holds several backward passes (a pipeline schedule runs microbatches' forwards ahead "
    "of their backwards): its updates cannot be attributed to logical microbatches";

// "microbatch 3 (step 0): ", or "microbatch 3 (id 7, step 0): " for a keyed one.
std::string RowLabel(const v1::MicrobatchResult& row) {
  std::string out = "microbatch ";
  AppendNumber(&out, row.index());
  out += " (";
  if (row.has_microbatch_id()) {
    out += "id ";
    AppendNumber(&out, row.microbatch_id());
    out += ", ";
  }
  out += "step ";
  AppendNumber(&out, row.step());
  out += "): ";
  return out;
}

// A closed microbatch whose updates belong to logical microbatches the trace cannot tell apart,
// and why (a row explanation); null when they can be. A marked range without an id that made
// backward updates and no forward update outside recompute is the backward of a microbatch whose
// forward ran in another range; a failing cut without markers that holds several backward passes
// holds several microbatches' backwards.
const char* Unattributable(const Segment& seg, bool fail) {
  if (seg.marked && !seg.keyed && seg.count[kBwd] > 0 &&
      seg.count[kFwd] <= seg.in_recompute[kFwd]) {
    return kSplitRow;
  }
  if (!seg.marked && fail && seg.backward_passes >= 2) return kCrowdedRow;
  return nullptr;
}

}  // namespace

struct Auditor::State {
  bool markers = false;  // a MICROBATCH_BEGIN was seen: markers segment from now on
  // The header said the recorder was told to expect markers ("nvtx"). The report's header says
  // what segmented instead (see SayMarkers), so set-up skipping keeps its own copy.
  bool markers_configured = false;
  bool in_backward = false;        // between BACKWARD_BEGIN and BACKWARD_END
  bool backward_observed = false;  // backward activity (or a backward update) anywhere so far
  std::vector<Frame> frames;
  uint32_t autocast_depth = 0;
  std::string module;
  // Ring of the last context (non-update) events, with their sequence numbers.
  std::array<v1::Event, kRing> ring;
  std::array<uint64_t, kRing> ring_seq{};
  uint64_t seq = 0;
  Segment seg;
  // Other threads' marked microbatches while `seg` is one thread's (see Route): at most one per
  // thread, in the order they were parked.
  std::vector<Segment> parked;
  // Keyed microbatches between their ranges (in the order they were set aside), at most
  // kMaxParked: the oldest closes first.
  std::vector<Segment> waiting;
  // Microbatches that cannot be told apart (first few listed): ranges without ids that hold a
  // backward pass without its forward; cuts without markers that hold several backward passes.
  uint64_t split = 0;
  std::vector<uint32_t> split_first;
  uint64_t crowded = 0;
  std::vector<uint32_t> crowded_first;
  uint32_t next_index = 0;
  uint32_t step = 0;
  bool header_seen = false;
  bool footer_seen = false;
  bool damaged = false;
  bool finished = false;
  uint32_t detailed = 0;     // failing microbatches given full detail so far
  bool rows_pruned = false;  // passing rows were dropped (max_rows exceeded)
  uint64_t violations = 0;
  FindingsBuilder findings;        // the count and recompute-precision problems collapsed
  uint64_t damage_violations = 0;  // of them TRACE_DAMAGED
  uint64_t frozen_backward = 0;    // of them microbatches whose backward scales froze
  // Kernel launches: the footer's count, else the largest running count an event carried, else
  // the number of events that came from kernel launches.
  uint64_t footer_launches = 0;
  uint64_t footer_end_unix_ns = 0;
  uint64_t first_event_ns = 0;  // timestamps (steady clock) of the first and last events
  uint64_t last_event_ns = 0;
  uint64_t launches_seen = 0;
  uint64_t kernel_events = 0;

  // The recording (header, TE_VERSION, TE_PATCHED, PROBES): see v1::Recording.
  bool probe_info = false;  // the recorder named its probes
  uint32_t active = 0;      // probe bits active now
  std::vector<std::string> active_names;
  bool te_call_heard = false;    // a TE_CALL event was seen: the te-call probe is at work
  bool hook_heard = false;       // the Python hook sent something: it is at work
  bool te_loaded = false;        // TE's version was recorded (the hook saw TE imported)
  std::string other_te_version;  // a second, different TE version recorded
  std::array<std::array<uint64_t, 2>, kSources> counted_by{};  // over the microbatches
  std::array<std::array<uint64_t, 2>, kSources> cross_by{};
  std::array<uint64_t, 2> unfused{};
  uint64_t unfused_microbatches = 0;
  std::vector<uint32_t> unfused_first;
  uint64_t disagreeing = 0;
  std::vector<uint32_t> disagreeing_first;

  bool InRecompute() const {
    for (const Frame& f : frames) {
      if (f.phase == 2) return true;
    }
    return false;
  }
  const Frame* Innermost() const { return frames.empty() ? nullptr : &frames.back(); }
};

Auditor::Auditor(Expectation expect)
    : Auditor([expect] {
        AuditorOptions o;
        o.expect = expect;
        return o;
      }()) {}

Auditor::Auditor(const AuditorOptions& options)
    : options_(options), state_(std::make_unique<State>()) {
  report_.set_rank(-1);
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
  // Bound what a header may hold in memory and in every rendering.
  for (std::string* str :
       {h->mutable_host(), h->mutable_agent_version(), h->mutable_gpu(), h->mutable_driver(),
        h->mutable_cuda(), h->mutable_markers(), h->mutable_cupti()}) {
    if (str->size() > kMaxStoredString) *str = TruncateUtf8(*str, kMaxStoredString);
  }
  if (h->command_size() > static_cast<int>(kMaxHeaderStrings)) {
    h->mutable_command()->DeleteSubrange(kMaxHeaderStrings, h->command_size() - kMaxHeaderStrings);
    h->set_command_cut(true);
  }
  for (std::string& arg : *h->mutable_command()) {
    if (arg.size() > kMaxStoredString) {
      arg = TruncateUtf8(arg, kMaxStoredString);
      h->set_command_cut(true);
    }
  }
  report_.set_rank(header.rank());
  s.markers_configured = header.markers() == "nvtx";
  // The agent's probes: its mode and those active from the start.
  v1::Recording* rec = report_.mutable_recording();
  rec->set_probe_mode(Printable(header.probe_mode(), 32));
  s.probe_info = !header.probe_mode().empty() || header.probes_size() > 0;
  SetProbes(header.probes());
  if (h->probes_size() > static_cast<int>(kMaxProbeNames)) {
    h->mutable_probes()->DeleteSubrange(kMaxProbeNames, h->probes_size() - kMaxProbeNames);
  }
  for (std::string& p : *h->mutable_probes()) {
    if (p.size() > 64) p = TruncateUtf8(p, 64);
  }
  if (h->probe_mode().size() > 64) h->set_probe_mode(TruncateUtf8(h->probe_mode(), 64));
}

void Auditor::SetProbes(const google::protobuf::RepeatedPtrField<std::string>& probes) {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  std::vector<std::string> now;
  uint32_t bits = 0;
  for (const std::string& p : probes) {
    if (now.size() == kMaxProbeNames) break;
    std::string name = Printable(p, 32);
    if (std::find(now.begin(), now.end(), name) != now.end()) continue;
    bits |= ProbeBit(name);
    now.push_back(std::move(name));
  }
  auto listed = [](const auto& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const std::string& name : now) {
    if (!listed(rec->probes(), name) && rec->probes_size() < static_cast<int>(kMaxProbeNames)) {
      rec->add_probes(name);
    }
  }
  for (const std::string& name : s.active_names) {
    if (!listed(now, name) && !listed(rec->released(), name) &&
        rec->released_size() < static_cast<int>(kMaxProbeNames)) {
      rec->add_released(name);
    }
  }
  s.active_names = std::move(now);
  s.active = bits;
  s.seg.probes_throughout &= bits;
  for (Segment& seg : s.waiting) seg.probes_throughout &= bits;
}

void Auditor::SayMarkers() {
  // The agent's words ("nvtx" when told to expect markers, else "threads"; an older writer none)
  // are replaced by what segmented this trace; another writer's own word (e.g. "model") stays.
  const State& s = *state_;
  if (!s.header_seen) return;
  const std::string& said = report_.header().markers();
  if (said.empty() || said == "nvtx" || said == "threads") {
    report_.mutable_header()->set_markers(s.markers ? "nvtx" : "threads");
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
  auto tally = [&](const Segment& seg) {
    const bool counted =
        seg.open &&
        (seg.marked || (seg.HasActivity() &&
                        !(s.markers_configured && seg.count[kFwd] == 0 && seg.count[kBwd] == 0)));
    if (!counted) return;
    ++(seg.marked && seg.ended ? ended : unfinished);
  };
  tally(s.seg);
  for (const Segment& seg : s.parked) tally(seg);
  for (const Segment& seg : s.waiting) tally(seg);
  std::string what = "trace ends without a footer (the process was killed?)";
  const uint64_t whole = s.next_index + ended;
  if (unfinished == 1 && ended == 0) {
    what += ": microbatch " + std::to_string(s.next_index) + " unfinished";
  } else if (unfinished > 0) {
    what += ": " + std::to_string(unfinished) + " microbatches of threads unfinished";
  } else if (whole > 0) {
    what += " after microbatch " + std::to_string(whole - 1);
  } else {
    what += " before its first microbatch";
  }
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

void Auditor::Unbalanced(const v1::Event& event, const std::string& message) {
  v1::Violation v;
  v.set_kind(v1::Violation::UNBALANCED);
  v.set_microbatch(state_->next_index);
  v.set_message(message);
  v1::Event* e = v.add_context();
  e->CopyFrom(event);
  BoundEventStrings(e);
  AddViolation(std::move(v));
}

void Auditor::Route(uint64_t thread) {
  State& s = *state_;
  if (thread == 0 || (s.seg.open && s.seg.owner == thread)) return;
  auto it = std::find_if(s.parked.begin(), s.parked.end(),
                         [thread](const Segment& seg) { return seg.owner == thread; });
  if (it == s.parked.end()) return;
  // The thread's own microbatch becomes the current one; the one current until now is parked in
  // its place (or, closed, nowhere).
  std::swap(s.seg, *it);
  if (!it->open) s.parked.erase(it);
}

void Auditor::SetAside() {
  State& s = *state_;
  Segment& seg = s.seg;
  // Its backward ran in a range that has ended: no later range of it is expected.
  if (!seg.keyed || (seg.ended && seg.part_backward)) {
    Close(/*complete=*/true);
    return;
  }
  if (s.waiting.size() >= kMaxParked) CloseWaiting(0);
  s.waiting.push_back(std::move(seg));
  seg = Segment();
}

bool Auditor::Resume(uint64_t key) {
  State& s = *state_;
  auto it = std::find_if(s.waiting.begin(), s.waiting.end(),
                         [key](const Segment& seg) { return seg.key == key; });
  if (it == s.waiting.end()) return false;
  s.seg = std::move(*it);
  s.waiting.erase(it);
  s.seg.ended = false;
  s.seg.part_backward = false;
  return true;
}

void Auditor::CloseWaiting(size_t i) {
  State& s = *state_;
  Segment current = std::move(s.seg);
  s.seg = std::move(s.waiting[i]);
  s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(i));
  Close(/*complete=*/s.seg.ended);
  s.seg = std::move(current);
}

void Auditor::Open(const v1::Event& event) {
  State& s = *state_;
  Segment& seg = s.seg;
  seg.open = true;
  seg.step = s.step;
  seg.start_seq = s.seq;
  seg.start.CopyFrom(event);
  BoundEventStrings(&seg.start);
  seg.logged_seq = {s.seq, s.seq};
  seg.probes_throughout = s.active;
}

void Auditor::Remember(const v1::Event& event) {
  State& s = *state_;
  const size_t slot = s.seq % kRing;
  s.ring[slot].CopyFrom(event);
  BoundEventStrings(&s.ring[slot]);
  s.ring_seq[slot] = s.seq;
}

void Auditor::Fact(const v1::Event& event) {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  if (event.kind() == v1::PROBES) {
    s.probe_info = true;
    SetProbes(event.probes());
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
  }
}

int Auditor::Direction(const v1::Event& event, v1::EventKind forward, v1::EventKind backward,
                       bool* inferred) const {
  *inferred = false;
  if (event.kind() == forward) return kFwd;
  if (event.kind() == backward) return kBwd;
  if (event.pass() == v1::BACKWARD) return kBwd;
  if (event.pass() == v1::FORWARD) return kFwd;
  *inferred = true;
  return state_->in_backward ? kBwd : kFwd;
}

void Auditor::CrossCheck(const v1::Event& event) {
  State& s = *state_;
  const int src = SourceIndex(event.source());
  if (src == kTeCall) s.te_call_heard = true;
  if (src == kHook) s.hook_heard = true;
  if (!s.seg.open) return;  // outside any microbatch: nothing to compare it with
  bool inferred = false;
  const int dir =
      Direction(event, v1::CROSSCHECK_UPDATE_FORWARD, v1::CROSSCHECK_UPDATE_BACKWARD, &inferred);
  const uint64_t n = event.count() == 0 ? 1 : event.count();
  s.seg.cross_by[src][dir] = SatAdd(s.seg.cross_by[src][dir], n);
}

void Auditor::OnEvent(const v1::Event& event) {
  State& s = *state_;
  if (s.finished) return;
  Dispatch(event);
  // The event belongs to the segment open after it (a segment it closed is not it).
  const uint64_t ts = event.timestamp_ns();
  if (s.seg.open && ts != 0) {
    if (s.seg.first_ns == 0 || ts < s.seg.first_ns) s.seg.first_ns = ts;
    s.seg.last_ns = std::max(s.seg.last_ns, ts);
  }
}

void Auditor::Dispatch(const v1::Event& event) {
  State& s = *state_;
  ++s.seq;
  v1::Totals* totals = report_.mutable_totals();
  totals->set_events(totals->events() + 1);
  if (event.source() == v1::KERNEL) ++s.kernel_events;
  if (event.timestamp_ns() != 0) {
    if (s.first_event_ns == 0) s.first_event_ns = event.timestamp_ns();
    s.last_event_ns = std::max(s.last_event_ns, event.timestamp_ns());
  }
  s.launches_seen = std::max(s.launches_seen, event.kernel_launches());
  const v1::EventKind kind = event.kind();

  if (!s.parked.empty()) Route(event.thread_id());

  // Neither a pass's activity nor an update: they open, close and count nothing.
  if (IsFact(kind)) {
    Fact(event);
    Remember(event);
    return;
  }
  if (IsCrossCheck(kind)) {
    CrossCheck(event);
    return;
  }

  // Microbatch markers and optimizer steps.
  if (kind == v1::MICROBATCH_BEGIN) {
    if (!s.markers) {
      Close(/*complete=*/true);  // what pass boundaries segmented before the first marker
      s.markers = true;
      SayMarkers();
    } else if (s.seg.open && s.seg.owner != 0 && event.thread_id() != 0 &&
               s.seg.owner != event.thread_id() && s.parked.size() < kMaxParked) {
      // Another thread's microbatch (this thread has none open, see Route): it stays open beside
      // this one, and its thread's events go on counting in it.
      s.parked.push_back(std::move(s.seg));
      s.seg = Segment();
    } else if (s.seg.open) {
      if (!s.seg.ended) {
        Unbalanced(event, "microbatch " + std::to_string(s.next_index + 1) +
                              " began while microbatch " + std::to_string(s.next_index) +
                              " had no end marker");
      }
      SetAside();
    }
    if (!event.has_microbatch_id() || !Resume(event.microbatch_id())) {
      Open(event);
      s.seg.marked = true;
      s.seg.keyed = event.has_microbatch_id();
      s.seg.key = event.microbatch_id();
    }
    s.seg.owner = event.thread_id();
    Remember(event);
    return;
  }
  if (kind == v1::MICROBATCH_END) {
    if (s.markers && s.seg.open && !s.seg.ended) {
      s.seg.ended = true;
    } else {
      Unbalanced(event, s.markers ? "microbatch end marker after microbatch " +
                                        std::to_string(s.next_index) + " had already ended"
                                  : std::string("microbatch end marker before any begin marker"));
    }
    Remember(event);
    return;
  }
  if (kind == v1::STEP) {
    if (!s.markers) Close(/*complete=*/true);
    while (!s.waiting.empty()) CloseWaiting(0);  // a step ends its keyed microbatches
    if (s.step < std::numeric_limits<uint32_t>::max()) ++s.step;
    Remember(event);
    return;
  }

  // Pass boundaries.
  if (kind == v1::BACKWARD_BEGIN) {
    s.in_backward = true;
    if (!s.seg.open) Open(event);
    s.seg.backward_seen = true;
    s.seg.part_backward = true;
    if (s.seg.backward_passes < std::numeric_limits<uint32_t>::max()) ++s.seg.backward_passes;
    s.backward_observed = true;
    Remember(event);
    return;
  }
  if (kind == v1::BACKWARD_END) {
    s.in_backward = false;
    Remember(event);
    return;
  }

  // Context state.
  switch (kind) {
    case v1::CHECKPOINT_ENTER:
      if (s.frames.size() == kMaxOpenFrames) s.frames.erase(s.frames.begin());
      s.frames.push_back(Frame{event.frame(), event.checkpoint_phase(), event.checkpoint_kind()});
      break;
    case v1::CHECKPOINT_EXIT: {
      auto it = std::find_if(s.frames.rbegin(), s.frames.rend(),
                             [&](const Frame& f) { return f.id == event.frame(); });
      if (it != s.frames.rend()) s.frames.erase(std::next(it).base());
      break;
    }
    case v1::AUTOCAST_ENTER:
    case v1::AUTOCAST_EXIT:
      s.autocast_depth = event.autocast_depth();
      break;
    case v1::MODULE_FORWARD:
    case v1::MODULE_BACKWARD:
      if (event.module().size() <= kMaxStoredString) {
        s.module.assign(event.module());  // reuses the string's storage
      } else {
        s.module = TruncateUtf8(event.module(), kMaxStoredString);
      }
      break;
    default:
      break;
  }

  const bool update = IsUpdate(kind);
  bool inferred = false;
  const int dir =
      update ? Direction(event, v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD, &inferred) : kFwd;
  const bool forward_activity = (update && dir == kFwd) || kind == v1::AUTOCAST_ENTER ||
                                kind == v1::MODULE_FORWARD ||
                                (kind == v1::CHECKPOINT_ENTER && event.checkpoint_phase() != 2) ||
                                (!update && event.pass() == v1::FORWARD);
  const bool backward_activity = (update && dir == kBwd) || kind == v1::MODULE_BACKWARD ||
                                 kind == v1::MODULE_RECOMPUTE ||
                                 (!update && event.pass() == v1::BACKWARD);

  if (!s.markers && s.seg.open && !s.in_backward && !s.InRecompute()) {
    if (forward_activity && s.seg.backward_seen) {
      Close(/*complete=*/true);  // a return from backward to forward
    } else if (update && dir == kFwd && !s.seg.backward_seen && options_.expect.forward > 0 &&
               s.seg.count[kFwd] >= options_.expect.forward) {
      Close(/*complete=*/true);  // another forward-only pass (evaluation)
    }
  }
  if (!s.seg.open) Open(event);
  if (forward_activity) s.seg.forward_seen = true;
  if (backward_activity) {
    s.seg.backward_seen = true;
    s.seg.part_backward = true;
    s.backward_observed = true;
  }

  if (kind == v1::MODULE_RECOMPUTE) s.seg.recompute.Add(event);
  if (update) {
    Count(event, dir, inferred);
  } else {
    Remember(event);
  }
}

void Auditor::Count(const v1::Event& event, int dir, bool inferred) {
  State& s = *state_;
  Segment& seg = s.seg;
  const uint64_t n = event.count() == 0 ? 1 : event.count();
  if (s.seq == seg.start_seq) seg.start_dir = dir;
  const uint64_t first = SatAdd(seg.count[dir], 1);
  seg.count[dir] = SatAdd(seg.count[dir], n);
  const Frame* frame = s.Innermost();
  const bool recompute = s.InRecompute();
  if (recompute) {
    seg.in_recompute[dir] = SatAdd(seg.in_recompute[dir], n);
  } else if (frame != nullptr) {
    seg.in_checkpoint[dir] = SatAdd(seg.in_checkpoint[dir], n);
  }
  if (seg.ended) seg.after_end[dir] = SatAdd(seg.after_end[dir], n);
  if (inferred) seg.inferred = SatAdd(seg.inferred, n);
  const int src = SourceIndex(event.source());
  seg.counted_by[src][dir] = SatAdd(seg.counted_by[src][dir], n);
  if (src == kTeCall) s.te_call_heard = true;
  if (src == kHook) {
    s.hook_heard = true;
    seg.unfused[dir] = SatAdd(seg.unfused[dir], HookUnfused(event.detail(), n));
  }

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
    // Context log: the context events since the last logged update, then the update.
    EventList& log = seg.log[dir];
    const v1::Event* stored = nullptr;
    if (log.size() < options_.max_context_events) {
      const uint64_t from = std::max(seg.logged_seq[dir], seg.start_seq);
      const uint64_t oldest = s.seq > kRing ? s.seq - kRing : 1;
      for (uint64_t q = std::max(from + 1, oldest); q < s.seq; ++q) {
        const size_t slot = q % kRing;
        if (s.ring_seq[slot] == q && log.size() + 1 < options_.max_context_events) {
          log.Push()->CopyFrom(s.ring[slot]);
        }
      }
      v1::Event* copy = log.Push();
      store(copy);
      stored = copy;
      seg.logged_seq[dir] = s.seq;
    } else {
      seg.log_dropped[dir] = SatAdd(seg.log_dropped[dir], 1);
    }
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
  // Where an extra update happened; consecutive extra updates in the same place share one note.
  std::string where;
  if (extra && (keep_detail || on_update)) where = Where(event, recompute, inferred);
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
    const uint64_t first_extra = std::max(first, expected + 1);
    std::vector<Note>& notes = seg.notes[dir];
    if (!notes.empty() && notes.back().where == where && notes.back().last + 1 == first_extra) {
      notes.back().last = seg.count[dir];
      ++notes.back().launches;
    } else if (notes.size() < options_.max_explanations) {
      notes.push_back(
          Note{first_extra, seg.count[dir], 1, n, event.timestamp_ns(), std::move(where)});
    } else {
      seg.notes_dropped[dir] = SatAdd(seg.notes_dropped[dir], seg.count[dir] - first_extra + 1);
    }
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

std::string Auditor::Where(const v1::Event& event, bool recompute, bool inferred) const {
  const State& s = *state_;
  std::string where;
  if (const Frame* frame = s.Innermost(); frame != nullptr) {
    const Frame* f = frame;
    if (recompute) {
      for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {
        if (it->phase == 2) {
          f = &*it;
          break;
        }
      }
    }
    where = recompute ? "during recompute" : "during the original forward";
    where += " of " + CheckpointKindName(f->kind) + " checkpoint frame " + std::to_string(f->id);
  } else {
    where = "outside any checkpoint";
  }
  where += ", autocast depth " + std::to_string(s.autocast_depth);
  if (!s.module.empty()) where += ", after module " + Printable(s.module, 128);
  if (s.seg.ended) where += ", after the microbatch's end marker";
  if (inferred) where += ", direction inferred from pass boundaries";
  where += " (thread " + std::to_string(event.thread_id());
  if (!event.detail().empty()) {
    where += ", " + SourceName(event.source()) + " " + Printable(event.detail(), 160);
  }
  where += ")";
  return where;
}

void Auditor::Close(bool complete) {
  State& s = *state_;
  Segment& seg = s.seg;
  if (!seg.open) return;
  // Not a microbatch: nothing happened in it, or it precedes the markers the recorder was told to
  // expect and holds no update (warm-up, set-up).
  if (!seg.marked && (!seg.HasActivity() ||
                      (s.markers_configured && seg.count[kFwd] == 0 && seg.count[kBwd] == 0))) {
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
  row.set_recompute_precision_changes(Sat32(recompute.changes()));
  const bool fail = wrong[kFwd] || wrong[kBwd] || recompute.changes() > 0;
  const char* apart = Unattributable(seg, fail);
  if (apart != nullptr) {
    const bool split = apart == kSplitRow;
    uint64_t& n = split ? s.split : s.crowded;
    std::vector<uint32_t>& first = split ? s.split_first : s.crowded_first;
    ++n;
    if (first.size() < kMaxListed) first.push_back(row.index());
  }
  const int frozen = FrozenDirection(seg.count, expected, complete);
  row.set_verdict(fail ? v1::FAIL : v1::PASS);
  const bool detail = fail && s.detailed < options_.max_detailed;
  if (detail) ++s.detailed;
  // Words are built only for a row that is kept or handed to on_microbatch (the common passing
  // row beyond max_rows is neither), and likewise for violations.
  const bool keep_row = WantRow(fail);
  const bool words = keep_row || on_microbatch || on_microbatch_span;

  if (words) {
    AddExplanations(seg, options_.expect, complete, expected, wrong, frozen, s.backward_observed,
                    detail, &row);
    const bool extra = seg.count[kFwd] > expected[kFwd] || seg.count[kBwd] > expected[kBwd];
    if (extra) {
      if (std::string line = SemanticsLine(); !line.empty()) row.add_explanations(std::move(line));
    }
    if (recompute.changes() > 0) row.add_explanations(recompute.Explanation());
    if (apart != nullptr) row.add_explanations(apart);
  }
  CompareProbes(words, &row);
  if (detail) {
    for (v1::Event& e : seg.updates) *row.add_updates() = std::move(e);
  }

  for (int dir : {kFwd, kBwd}) {
    if (!wrong[dir]) continue;
    const auto kind = dir == kFwd ? v1::Violation::FORWARD_COUNT : v1::Violation::BACKWARD_COUNT;
    if (dir == kBwd && frozen == kBwd) ++s.frozen_backward;
    std::string cause;
    AppendUpdates(&cause, seg.count[dir], dir);
    cause += ", expected ";
    AppendNumber(&cause, expected[dir]);
    if (!complete) cause += " (incomplete microbatch)";
    if (dir == frozen) cause += FrozenSuffix(dir);
    s.findings.Add(kind, row.index(), row.step(), cause, words ? &row.explanations() : nullptr);
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

  if (recompute.changes() > 0) {
    std::string cause = recompute.ViolationMessage();
    s.findings.Add(v1::Violation::RECOMPUTE_PRECISION, row.index(), row.step(), cause, nullptr);
    if (on_violation || KeepsViolation(v1::Violation::RECOMPUTE_PRECISION)) {
      v1::Violation v;
      v.set_kind(v1::Violation::RECOMPUTE_PRECISION);
      v.set_microbatch(row.index());
      v.set_message(RowLabel(row) + cause);
      v.set_cause(std::move(cause));
      AddViolation(std::move(v));
    } else {
      ++s.violations;
    }
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
  if (keep_row) *report_.add_microbatches() = std::move(row);
  seg.Reset();
}

Auditor::Chosen Auditor::ChosenSemantics() const {
  const v1::Recording& rec = report_.recording();
  if (!options_.semantics.empty()) {
    const auto given = state::ParseSemantics(options_.semantics);
    return {given ? std::string(state::SemanticsName(*given)) : options_.semantics, "flag"};
  }
  if (rec.te_patched()) {
    if (rec.patched_semantics().empty()) return {"fixed", "patch"};
    if (const auto applied = state::ParseSemantics(rec.patched_semantics())) {
      return {std::string(state::SemanticsName(*applied)), "patch"};
    }
  }
  if (const auto te = state::SemanticsForTeVersion(rec.te_version())) {
    return {std::string(state::SemanticsName(*te)), "te_version"};
  }
  return {};
}

std::string Auditor::SemanticsLine() const {
  const Chosen chosen = ChosenSemantics();
  if (chosen.name.empty()) return {};
  const std::string& te = report_.recording().te_version();
  std::string line = "model semantics " + chosen.name;
  if (chosen.from == "flag") {
    line += " (--semantics)";
  } else if (chosen.from == "patch") {
    line += " (TE " + (te.empty() ? std::string() : te + " ") + "patched by fp8audit.te)";
  } else {
    line += " (from TE " + te + ")";
  }
  if (chosen.name != "fixed") {
    return line +
           ": Transformer Engine's own update ownership makes extra updates under activation "
           "checkpointing (its recompute and reentrant frames update again); `fp8audit model "
           "--semantics " +
           chosen.name +
           "` predicts a layout's counts, `fp8audit run --fix-te` applies the fixed ownership";
  }
  if (chosen.from == "patch") {
    return line +
           ": the patched ownership makes one forward and one backward update per logical "
           "microbatch, so the model does not explain these extra ones (check the microbatch "
           "markers, else report it)";
  }
  return line +
         ": the corrected ownership makes one forward and one backward update per logical "
         "microbatch; these extra ones are the job's own (for TE, `fp8audit run --fix-te` "
         "applies the fixed ownership)";
}

void Auditor::CompareProbes(bool words, v1::MicrobatchResult* row) {
  State& s = *state_;
  const Segment& seg = s.seg;
  bool any = false;
  for (int src = 0; src < kSources; ++src) {
    for (int dir : {kFwd, kBwd}) {
      s.counted_by[src][dir] = SatAdd(s.counted_by[src][dir], seg.counted_by[src][dir]);
      s.cross_by[src][dir] = SatAdd(s.cross_by[src][dir], seg.cross_by[src][dir]);
      any = any || seg.counted_by[src][dir] > 0 || seg.cross_by[src][dir] > 0;
    }
  }
  if (seg.unfused[kFwd] + seg.unfused[kBwd] > 0) {
    s.unfused[kFwd] = SatAdd(s.unfused[kFwd], seg.unfused[kFwd]);
    s.unfused[kBwd] = SatAdd(s.unfused[kBwd], seg.unfused[kBwd]);
    ++s.unfused_microbatches;
    if (s.unfused_first.size() < kMaxListed) s.unfused_first.push_back(row->index());
  }
  // By source, for a trace whose recorder names its probes (an older agent's updates are all its
  // kernel probe's, the runtime's and model's their own).
  if (words && any && s.probe_info) {
    v1::SourceTallies* by = row->mutable_by_source();
    for (int src = 0; src < kSources; ++src) {
      const bool seen = seg.counted_by[src][kFwd] + seg.counted_by[src][kBwd] +
                            seg.cross_by[src][kFwd] + seg.cross_by[src][kBwd] >
                        0;
      if (!seen) continue;
      v1::ProbeTally* t = src == kKernel   ? by->mutable_kernel()
                          : src == kTeCall ? by->mutable_te_call()
                          : src == kHook   ? by->mutable_python_hook()
                                           : by->mutable_other();
      t->set_forward(Sat32(seg.counted_by[src][kFwd]));
      t->set_backward(Sat32(seg.counted_by[src][kBwd]));
      t->set_crosscheck_forward(Sat32(seg.cross_by[src][kFwd]));
      t->set_crosscheck_backward(Sat32(seg.cross_by[src][kBwd]));
      if (src == kHook) {
        t->set_unfused_forward(Sat32(seg.unfused[kFwd]));
        t->set_unfused_backward(Sat32(seg.unfused[kBwd]));
      }
    }
  }
  // Compared: the probes active throughout the microbatch that are known to be at work (the
  // te-call probe once TE called it or the hook saw TE imported; the hook once it sent anything;
  // cupti whenever subscribed). Each one's count of the fused updates (the hook's unfused ones
  // no other probe can see).
  if (!s.probe_info) return;
  uint32_t compared = seg.probes_throughout;
  if (!s.te_call_heard && !s.te_loaded) compared &= ~ProbeBit("te-call");
  if (!s.hook_heard) compared &= ~ProbeBit("python-hook");
  bool disagree = false;
  for (int dir : {kFwd, kBwd}) {
    std::string line;
    bool differ = false;
    uint64_t first = 0;
    int n = 0;
    for (int src : kCompared) {
      if ((compared & 1u << src) == 0) continue;
      uint64_t seen = SatAdd(seg.counted_by[src][dir], seg.cross_by[src][dir]);
      if (src == kHook) seen -= std::min(seen, seg.unfused[dir]);
      if (n++ == 0) first = seen;
      differ = differ || seen != first;
      line += (line.empty() ? "" : ", ") + std::string(kProbeName[src]) + " ";
      AppendNumber(&line, seen);
    }
    if (n < 2 || !differ) continue;
    disagree = true;
    if (!words) continue;
    std::string note = "probes disagree on ";
    note += DirWord(dir);
    note += " updates: " + line + " (counted ";
    AppendNumber(&note, seg.count[dir]);
    note += ")";
    row->add_probe_notes(std::move(note));
  }
  if (disagree) {
    ++s.disagreeing;
    if (s.disagreeing_first.size() < kMaxListed) s.disagreeing_first.push_back(row->index());
  }
}

namespace {

// "3" or "0, 4, 7, 9, 12, ..." (`first` are the first of `total`).
std::string Listed(const std::vector<uint32_t>& first, uint64_t total) {
  std::string out;
  for (uint32_t i : first) {
    if (!out.empty()) out += ", ";
    AppendNumber(&out, i);
  }
  if (total > first.size()) out += ", ...";
  return out;
}

}  // namespace

void Auditor::FinishRecording() {
  State& s = *state_;
  v1::Recording* rec = report_.mutable_recording();
  const bool cupti =
      std::find(rec->probes().begin(), rec->probes().end(), "cupti") != rec->probes().end();
  rec->set_kernel_launches_not_counted(s.probe_info && !cupti);
  const Chosen chosen = ChosenSemantics();
  rec->set_semantics(chosen.name);
  rec->set_semantics_from(chosen.from);
  bool any = false;
  for (int src = 0; src < kSources && s.probe_info; ++src) {
    const auto& c = s.counted_by[src];
    const auto& x = s.cross_by[src];
    if (c[kFwd] + c[kBwd] + x[kFwd] + x[kBwd] == 0) continue;
    any = true;
    v1::SourceTallies* by = rec->mutable_by_source();
    v1::ProbeTally* t = src == kKernel   ? by->mutable_kernel()
                        : src == kTeCall ? by->mutable_te_call()
                        : src == kHook   ? by->mutable_python_hook()
                                         : by->mutable_other();
    t->set_forward(Sat32(c[kFwd]));
    t->set_backward(Sat32(c[kBwd]));
    t->set_crosscheck_forward(Sat32(x[kFwd]));
    t->set_crosscheck_backward(Sat32(x[kBwd]));
    if (src == kHook) {
      t->set_unfused_forward(Sat32(s.unfused[kFwd]));
      t->set_unfused_backward(Sat32(s.unfused[kBwd]));
    }
  }
  if (!any) rec->clear_by_source();
  rec->set_disagreeing_microbatches(Sat32(s.disagreeing));
  rec->clear_notes();
  if (!s.other_te_version.empty()) {
    rec->add_notes("Transformer Engine's version changed while the job ran: " + rec->te_version() +
                   ", then " + s.other_te_version);
  }
  if (s.disagreeing > 0) {
    rec->add_notes("probes disagree in " + Plural(s.disagreeing, "microbatch", "microbatches") +
                   " (" + Listed(s.disagreeing_first, s.disagreeing) + ")");
  }
  if (s.unfused_microbatches > 0) {
    rec->add_notes(Plural(SatAdd(s.unfused[kFwd], s.unfused[kBwd]), "update", "updates") + " in " +
                   Plural(s.unfused_microbatches, "microbatch", "microbatches") + " (" +
                   Listed(s.unfused_first, s.unfused_microbatches) +
                   ") came only from the Python hook: Transformer Engine's unfused update path "
                   "(NVTE_UNFUSED_FP8_UPDATE=1 or a callable amax or scale algorithm), where the "
                   "te-call and cupti probes see nothing");
  }
  if (s.split > 0) {
    rec->add_notes("microbatches cannot be told apart: " +
                   Plural(s.split, "microbatch range", "microbatch ranges") + " (" +
                   Listed(s.split_first, s.split) + (s.split == 1 ? ") holds" : ") hold") +
                   " a backward pass without its forward, as a pipeline schedule (1F1B, "
                   "interleaved) runs a later microbatch's forward before this one's backward, "
                   "and the ranges name no microbatch: their counts are not per logical "
                   "microbatch; " +
                   kRemedy);
  }
  if (s.crowded > 0) {
    rec->add_notes("microbatches cannot be told apart: " + Plural(s.crowded, "cut", "cuts") + " (" +
                   Listed(s.crowded_first, s.crowded) + (s.crowded == 1 ? ") holds" : ") hold") +
                   " several backward passes, as a pipeline schedule (1F1B, interleaved) "
                   "runs later microbatches' forwards before earlier ones' backwards: without "
                   "markers the counts are not per logical microbatch; " +
                   kRemedy);
  }
  if (!s.markers && report_.totals().failing_microbatches() > 0) {
    rec->add_notes(
        "no fp8audit.microbatch markers in this trace: microbatches were cut where work returned "
        "to the training thread after a backward pass, so one cut can hold more than one logical "
        "microbatch (a forward without its backward, a test session's unrelated passes); mark them "
        "(with fp8audit.microbatch():) for exact counts, or judge a pytest session per test "
        "(pytest --fp8audit)");
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
  if (s.seg.open) s.parked.push_back(std::move(s.seg));
  for (Segment& seg : s.waiting) s.parked.push_back(std::move(seg));
  s.waiting.clear();
  std::stable_sort(s.parked.begin(), s.parked.end(),
                   [](const Segment& a, const Segment& b) { return a.start_seq < b.start_seq; });
  for (Segment& seg : s.parked) {
    s.seg = std::move(seg);
    Close(s.markers ? s.seg.ended : (s.footer_seen && !s.damaged));
  }
  s.parked.clear();
  s.seg = Segment();
  s.finished = true;
  s.findings.WriteTo(&report_);
  SayMarkers();
  report_.mutable_totals()->set_kernel_launches(s.footer_launches > 0 ? s.footer_launches
                                                : s.launches_seen > 0 ? s.launches_seen
                                                                      : s.kernel_events);
  report_.set_verdict(s.violations > 0 ? v1::FAIL : v1::PASS);
  // Backward updates were expected and never was a backward pass seen: the microbatches' missing
  // backward updates are failures the audit cannot confirm (no backward pass, or one it cannot
  // see).
  const bool no_backward = !s.backward_observed && s.frozen_backward > 0;
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
