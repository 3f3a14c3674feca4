// The auditor's engine below the judging (reports/auditor.h says how a trace is segmented): what
// kind of event counts, segments or only says something about the recording, the direction an
// update counts in, the checkpoint and autocast context updates happen in, and the microbatch
// being built with its counts per direction and the events kept for its detail. No words here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8audit/trace.pb.h"
#include "reports/frozen_modules.h"
#include "reports/probe_tally.h"
#include "reports/recompute_precision.h"
#include "reports/weight_refresh.h"

namespace fp8audit::reports {

namespace v1 = ::fp8audit::v1;

inline constexpr int kFwd = 0;
inline constexpr int kBwd = 1;

bool IsUpdate(v1::EventKind kind);  // UPDATE_FORWARD, UPDATE_BACKWARD, UPDATE
// A second probe's view of an update another probe recorded: tallied, never counted.
bool IsCrossCheck(v1::EventKind kind);
// Facts about the recording (TE's version and patch, probe changes): no activity of a pass.
bool IsFact(v1::EventKind kind);

// kFwd or kBwd: an update's (or cross-check's) kind (`forward`, `backward`), else its pass, else
// the pass boundaries (`in_backward`; then `inferred`).
int Direction(const v1::Event& event, v1::EventKind forward, v1::EventKind backward,
              bool in_backward, bool* inferred);

// Whether an event is activity of the forward or the backward pass (an update in direction `dir`).
struct Activity {
  bool forward = false;
  bool backward = false;
};
Activity ActivityOf(const v1::Event& event, bool update, int dir);

struct Frame {
  uint64_t id = 0;
  uint32_t phase = 0;
  v1::CheckpointKind kind = v1::CHECKPOINT_KIND_UNSPECIFIED;
};

// Where the job is: the checkpoint frames open (at most 64, the oldest forgotten first), the
// autocast depth and the last module seen.
struct Context {
  std::vector<Frame> frames;
  uint32_t autocast_depth = 0;
  std::string module;
  std::string site;  // the last CALL_SITE: where in the job's Python code (empty: not known)

  // Follows CHECKPOINT_*, AUTOCAST_*, MODULE_FORWARD/BACKWARD and CALL_SITE; other events change
  // nothing.
  void Apply(const v1::Event& event);
  bool InRecompute() const;  // inside a frame's recompute (phase 2)
  const Frame* Innermost() const;
  // The frame an update is said to happen in: the innermost recomputing one during recompute,
  // else the innermost; null outside checkpoints.
  const Frame* Shown(bool recompute) const;
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

// The last few context (non-update) events, by sequence number.
class Ring {
 public:
  static constexpr size_t kSize = 4;
  void Remember(const v1::Event& event, uint64_t seq);
  // Appends the remembered events numbered after `from` and before `seq` to `log` while it holds
  // fewer than `cap` - 1.
  void CopyInto(uint64_t from, uint64_t seq, size_t cap, EventList* log) const;

 private:
  std::array<v1::Event, kSize> events_;
  std::array<uint64_t, kSize> seq_{};
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

// The microbatch being built.
struct Segment {
  bool open = false;
  bool marked = false;  // opened by a MICROBATCH_BEGIN
  uint64_t owner = 0;   // that BEGIN's thread (0: none recorded)
  bool ended = false;   // its MICROBATCH_END was seen
  // Its ranges name a logical microbatch (MICROBATCH_BEGIN's microbatch_id): every range with that
  // id resumes it, also after other microbatches' ranges.
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
  ProbeTallies probes;             // what each source saw
  uint32_t probes_throughout = 0;  // probe bits active from its opening to now
  RecomputePrecision recompute;    // the modules recomputed in its backward (MODULE_RECOMPUTE)
  WeightRefresh refresh;           // the weight caches its recomputes re-quantized (WEIGHT_REFRESH)
  // The modules whose first frozen scale in the run belongs to it (FROZEN_SCALE; the Segmenter's
  // frozen_modules() says which).
  std::vector<std::string> frozen;
  // TE PR #3456's quantization_backward_scope left at its outermost level in it (BACKWARD_SCOPE
  // exits), for the job's comparison of ranks (reports/backward_scope.h).
  uint32_t scope_exits = 0;
  // Per direction: a module ran in it since its last update here (MODULE_FORWARD, a recompute in
  // FP8: forward; MODULE_BACKWARD: backward).
  std::array<bool, 2> module_ran{};
  uint32_t fix_lost = 0;        // fp8audit.te's safety net said it lost an update here
  std::string fix_lost_reason;  // the first one's (FIX_LOST_UPDATE detail)

  // Closed, ready for the next microbatch; the kept events' storage stays.
  void Reset();
  bool HasActivity() const;
  // Whether, closed, it is a microbatch: opened by a marker, or with activity and, when the
  // recorder was told to expect markers, updates (not warm-up or set-up before them).
  bool IsMicrobatch(bool markers_configured) const;
  // An update counted `n` times in `dir` (`inferred`: by pass boundaries) in the context `ctx`.
  void Tally(const v1::Event& event, int dir, uint64_t n, bool inferred, const Context& ctx);
  // Logs an update numbered `seq` in `dir` after the context events `ring` holds since the last
  // update logged there, within `cap` events: the slot to store the update in, or null (counted in
  // log_dropped) when the log is full.
  v1::Event* Log(int dir, uint64_t seq, const Ring& ring, size_t cap);
  // Extra updates `first_extra`..count[dir] of one event of `n`, at `where`: joins the last note
  // when at the same place and consecutive, else a new note while fewer than `cap`.
  void AddNote(int dir, uint64_t first_extra, uint64_t n, uint64_t timestamp_ns, std::string where,
               size_t cap);
};

// Why a closed microbatch's updates belong to logical microbatches the trace cannot tell apart.
// kSplit: a marked range without an id that made backward updates and no forward update outside
// recompute (the backward of a microbatch whose forward ran in another range). kCrowded: a failing
// cut without markers that holds several backward passes (several microbatches' backwards).
enum class Apart { kNone, kSplit, kCrowded };
Apart Unattributable(const Segment& seg, bool fail);

// Microbatches named in a note: how many, and the first few indices.
struct Listing {
  static constexpr size_t kMaxListed = 5;
  uint64_t total = 0;
  std::vector<uint32_t> first;
  void Add(uint32_t index);
};

// A marker that does not pair (an UNBALANCED violation): a BEGIN while the same thread's
// microbatch is open without END, an END after the current microbatch's END, an END before any
// BEGIN.
enum class Unbalance { kBeginWithoutEnd, kEndAfterEnd, kEndBeforeBegin };

// Segments a trace's events into microbatches, as reports/auditor.h describes: the one being built
// (current()), other threads' open beside it, keyed ones waiting for their next range. Closing a
// microbatch is its owner's: `close` judges current() (complete or not) and Reset()s it.
class Segmenter {
 public:
  Segmenter(std::function<void(bool complete)> close,
            std::function<void(const v1::Event&, Unbalance)> unbalanced);

  // The header said the recorder was told to expect markers ("nvtx").
  void set_markers_configured(bool configured) { markers_configured_ = configured; }
  bool markers_configured() const { return markers_configured_; }
  // The probe bits active from now on (the header's, a PROBES event's).
  void SetActiveProbes(uint32_t bits);

  // A new event, numbered seq(): with other threads' microbatches open, the one of its thread
  // becomes current().
  void Advance(const v1::Event& event);
  // A context event that neither opens nor closes anything (TE_VERSION, TE_PATCHED, PROBES).
  void Remember(const v1::Event& event) { ring_.Remember(event, seq_); }
  // Any other event: markers, steps, pass boundaries and context move the segmentation, and the
  // current microbatch is opened or cut where the event starts a new one. True for an update to
  // be counted in current(), in `*dir` (`*inferred`: by pass boundaries); else the event is
  // remembered as context.
  bool Assign(const v1::Event& event, uint32_t expect_forward, int* dir, bool* inferred);
  // The event (after Assign) happened at `timestamp_ns` in the microbatch open after it.
  void Stamp(uint64_t timestamp_ns);
  // The open microbatches still to close: `ended` of them marked and ended, the others unfinished.
  void CountOpen(uint64_t* ended, uint64_t* unfinished) const;
  // The end: closes every open microbatch in the order they began (one segmented without markers
  // as `complete_unmarked`).
  void CloseAll(bool complete_unmarked);

  Segment& current() { return seg_; }
  bool markers() const { return markers_; }  // a MICROBATCH_BEGIN was seen
  bool in_backward() const { return in_backward_; }
  bool backward_observed() const { return backward_observed_; }
  const Context& context() const { return ctx_; }
  // Whether the trace records the module runs of direction `dir` where an update happens now:
  // module markers of that direction were seen, or, for a forward update during a recompute, the
  // Python hook's recompute marks.
  bool ModulesVisible(int dir) const {
    return module_events_seen_[dir] || (dir == kFwd && recompute_marks_seen_ && ctx_.InRecompute());
  }
  const Ring& ring() const { return ring_; }
  uint64_t seq() const { return seq_; }

  // FROZEN_SCALE: a module's first one in the run belongs to the segment Assign gives the event,
  // as every event does (after a range's END, the most recently begun microbatch). Where that
  // segment turns out to be no microbatch (set-up before the markers the recorder was told to
  // expect: see IsMicrobatch), its owner hands them back here (Defer) and the next segment to
  // open takes them; at the end, the last microbatch still open takes those left. Any left after
  // that (the last microbatch closed before them) are the owner's (TakeDeferredFrozen).
  const FrozenModules& frozen_modules() const { return frozen_; }
  void Defer(std::vector<std::string> modules);
  std::vector<std::string> TakeDeferredFrozen() { return std::move(deferred_frozen_); }

 private:
  void Route(uint64_t thread);
  void Begin(const v1::Event& event);
  // At a MICROBATCH_BEGIN on the current microbatch's thread: a keyed microbatch whose backward
  // has not ended waits for its next range, any other closes.
  void SetAside();
  // The waiting keyed microbatch `key` becomes the current one; false when none waits.
  bool Resume(uint64_t key);
  void CloseWaiting(size_t i);
  void Open(const v1::Event& event);
  void TakeDeferred(Segment* seg);  // the deferred frozen scales go to `seg`

  std::function<void(bool)> close_;
  std::function<void(const v1::Event&, Unbalance)> unbalanced_;
  bool markers_ = false;
  // The report's header says what segmented instead (see Auditor::SayMarkers), so set-up
  // skipping keeps its own copy.
  bool markers_configured_ = false;
  bool in_backward_ = false;        // between BACKWARD_BEGIN and BACKWARD_END
  bool backward_observed_ = false;  // backward activity (or a backward update) anywhere so far
  std::array<bool, 2> module_events_seen_{};  // MODULE_FORWARD, MODULE_BACKWARD so far
  bool recompute_marks_seen_ = false;         // MODULE_RECOMPUTE so far
  Context ctx_;
  Ring ring_;  // the last context (non-update) events
  uint64_t seq_ = 0;
  uint32_t step_ = 0;
  uint32_t active_ = 0;  // probe bits active now
  Segment seg_;
  // Other threads' marked microbatches while `seg_` is one thread's (see Route): at most one per
  // thread, in the order they were parked.
  std::vector<Segment> parked_;
  // Keyed microbatches between their ranges (in the order they were set aside), at most 256: the
  // oldest closes first.
  std::vector<Segment> waiting_;
  FrozenModules frozen_;                      // modules with a frozen scale so far
  std::vector<std::string> deferred_frozen_;  // their first ones no microbatch took yet
};

}  // namespace fp8audit::reports
