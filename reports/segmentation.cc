#include "reports/segmentation.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "reports/backward_scope.h"
#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

constexpr size_t kMaxOpenFrames = 64;  // checkpoint frames tracked at once
constexpr size_t kMaxParked = 4096;    // other threads' microbatches open at once

}  // namespace

bool IsUpdate(v1::EventKind kind) {
  return kind == v1::UPDATE_FORWARD || kind == v1::UPDATE_BACKWARD || kind == v1::UPDATE;
}

bool IsCrossCheck(v1::EventKind kind) {
  return kind == v1::CROSSCHECK_UPDATE_FORWARD || kind == v1::CROSSCHECK_UPDATE_BACKWARD ||
         kind == v1::CROSSCHECK_UPDATE;
}

bool IsFact(v1::EventKind kind) {
  return kind == v1::TE_VERSION || kind == v1::TE_PATCHED || kind == v1::PROBES ||
         kind == v1::PYTHON_HOOK_ABSENT || kind == v1::CHILD_WITHOUT_AGENT || kind == v1::RECIPE ||
         kind == v1::HOOK_UNCHECKED;
}

int Direction(const v1::Event& event, v1::EventKind forward, v1::EventKind backward,
              bool in_backward, bool* inferred) {
  *inferred = false;
  if (event.kind() == forward) return kFwd;
  if (event.kind() == backward) return kBwd;
  if (event.pass() == v1::BACKWARD) return kBwd;
  if (event.pass() == v1::FORWARD) return kFwd;
  *inferred = true;
  return in_backward ? kBwd : kFwd;
}

Activity ActivityOf(const v1::Event& event, bool update, int dir) {
  const v1::EventKind kind = event.kind();
  Activity a;
  a.forward = (update && dir == kFwd) || kind == v1::AUTOCAST_ENTER || kind == v1::MODULE_FORWARD ||
              kind == v1::FROZEN_SCALE ||
              (kind == v1::CHECKPOINT_ENTER && event.checkpoint_phase() != 2) ||
              (!update && event.pass() == v1::FORWARD);
  a.backward = (update && dir == kBwd) || kind == v1::MODULE_BACKWARD ||
               kind == v1::MODULE_RECOMPUTE || kind == v1::WEIGHT_REFRESH ||
               kind == v1::FIX_LOST_UPDATE || (!update && event.pass() == v1::BACKWARD);
  return a;
}

void Context::Apply(const v1::Event& event) {
  switch (event.kind()) {
    case v1::CHECKPOINT_ENTER:
      if (frames.size() == kMaxOpenFrames) frames.erase(frames.begin());
      frames.push_back(Frame{event.frame(), event.checkpoint_phase(), event.checkpoint_kind()});
      break;
    case v1::CHECKPOINT_EXIT: {
      auto it = std::find_if(frames.rbegin(), frames.rend(),
                             [&](const Frame& f) { return f.id == event.frame(); });
      if (it != frames.rend()) frames.erase(std::next(it).base());
      break;
    }
    case v1::AUTOCAST_ENTER:
    case v1::AUTOCAST_EXIT:
      autocast_depth = event.autocast_depth();
      break;
    case v1::MODULE_FORWARD:
    case v1::MODULE_BACKWARD:
      if (event.module().size() <= kMaxStoredString) {
        module.assign(event.module());  // reuses the string's storage
      } else {
        module = TruncateUtf8(event.module(), kMaxStoredString);
      }
      break;
    case v1::CALL_SITE:
      site.assign(event.detail().size() <= kMaxStoredString
                      ? event.detail()
                      : TruncateUtf8(event.detail(), kMaxStoredString));
      break;
    default:
      break;
  }
}

bool Context::InRecompute() const {
  for (const Frame& f : frames) {
    if (f.phase == 2) return true;
  }
  return false;
}

const Frame* Context::Innermost() const { return frames.empty() ? nullptr : &frames.back(); }

const Frame* Context::Shown(bool recompute) const {
  const Frame* f = Innermost();
  if (f == nullptr || !recompute) return f;
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    if (it->phase == 2) return &*it;
  }
  return f;
}

void Ring::Remember(const v1::Event& event, uint64_t seq) {
  const size_t slot = seq % kSize;
  events_[slot].CopyFrom(event);
  BoundEventStrings(&events_[slot]);
  seq_[slot] = seq;
}

void Ring::CopyInto(uint64_t from, uint64_t seq, size_t cap, EventList* log) const {
  const uint64_t oldest = seq > kSize ? seq - kSize : 1;
  for (uint64_t q = std::max(from + 1, oldest); q < seq; ++q) {
    const size_t slot = q % kSize;
    if (seq_[slot] == q && log->size() + 1 < cap) log->Push()->CopyFrom(events_[slot]);
  }
}

void Segment::Reset() {
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

bool Segment::HasActivity() const {
  return count[kFwd] > 0 || count[kBwd] > 0 || forward_seen || backward_seen;
}

bool Segment::IsMicrobatch(bool markers_configured) const {
  return marked || (HasActivity() && !(markers_configured && count[kFwd] == 0 && count[kBwd] == 0));
}

void Segment::Tally(const v1::Event& event, int dir, uint64_t n, bool was_inferred,
                    const Context& ctx) {
  count[dir] = SatAdd(count[dir], n);
  if (ctx.InRecompute()) {
    in_recompute[dir] = SatAdd(in_recompute[dir], n);
  } else if (ctx.Innermost() != nullptr) {
    in_checkpoint[dir] = SatAdd(in_checkpoint[dir], n);
  }
  if (ended) after_end[dir] = SatAdd(after_end[dir], n);
  if (was_inferred) inferred = SatAdd(inferred, n);
  probes.Count(event.source(), dir, n, event.detail());
}

v1::Event* Segment::Log(int dir, uint64_t seq, const Ring& ring, size_t cap) {
  EventList& l = log[dir];
  if (l.size() >= cap) {
    log_dropped[dir] = SatAdd(log_dropped[dir], 1);
    return nullptr;
  }
  ring.CopyInto(std::max(logged_seq[dir], start_seq), seq, cap, &l);
  logged_seq[dir] = seq;
  return l.Push();
}

void Segment::AddNote(int dir, uint64_t first_extra, uint64_t n, uint64_t timestamp_ns,
                      std::string where, size_t cap) {
  std::vector<Note>& list = notes[dir];
  if (!list.empty() && list.back().where == where && list.back().last + 1 == first_extra) {
    list.back().last = count[dir];
    ++list.back().launches;
  } else if (list.size() < cap) {
    list.push_back(Note{first_extra, count[dir], 1, n, timestamp_ns, std::move(where)});
  } else {
    notes_dropped[dir] = SatAdd(notes_dropped[dir], count[dir] - first_extra + 1);
  }
}

Apart Unattributable(const Segment& seg, bool fail) {
  if (seg.marked && !seg.keyed && seg.count[kBwd] > 0 &&
      seg.count[kFwd] <= seg.in_recompute[kFwd]) {
    return Apart::kSplit;
  }
  if (!seg.marked && fail && seg.backward_passes >= 2) return Apart::kCrowded;
  return Apart::kNone;
}

void Listing::Add(uint32_t index) {
  ++total;
  if (first.size() < kMaxListed) first.push_back(index);
}

Segmenter::Segmenter(std::function<void(bool complete)> close,
                     std::function<void(const v1::Event&, Unbalance)> unbalanced)
    : close_(std::move(close)), unbalanced_(std::move(unbalanced)) {}

void Segmenter::SetActiveProbes(uint32_t bits) {
  active_ = bits;
  seg_.probes_throughout &= bits;
  for (Segment& seg : waiting_) seg.probes_throughout &= bits;
}

void Segmenter::Advance(const v1::Event& event) {
  ++seq_;
  if (!parked_.empty()) Route(event.thread_id());
}

void Segmenter::Route(uint64_t thread) {
  if (thread == 0 || (seg_.open && seg_.owner == thread)) return;
  auto it = std::find_if(parked_.begin(), parked_.end(),
                         [thread](const Segment& seg) { return seg.owner == thread; });
  if (it == parked_.end()) return;
  // The thread's own microbatch becomes the current one; the one current until now is parked in
  // its place (or, closed, nowhere).
  std::swap(seg_, *it);
  if (!it->open) parked_.erase(it);
}

void Segmenter::Begin(const v1::Event& event) {
  if (!markers_) {
    close_(/*complete=*/true);  // what pass boundaries segmented before the first marker
    markers_ = true;
  } else if (seg_.open && seg_.ended) {
    // Its end marker came: it is over (or, keyed, waits for its id's next range), whichever
    // thread begins now. Parked, it would take the events of a later thread that the system gave
    // its thread's id (short-lived threads reuse ids).
    SetAside();
  } else if (seg_.open && seg_.owner != 0 && event.thread_id() != 0 &&
             seg_.owner != event.thread_id() && parked_.size() < kMaxParked) {
    // Another thread's microbatch (this thread has none open, see Route): it stays open beside
    // this one, and its thread's events go on counting in it.
    parked_.push_back(std::move(seg_));
    seg_ = Segment();
  } else if (seg_.open) {
    if (!seg_.ended) unbalanced_(event, Unbalance::kBeginWithoutEnd);
    SetAside();
  }
  if (!event.has_microbatch_id() || !Resume(event.microbatch_id())) {
    Open(event);
    seg_.marked = true;
    seg_.keyed = event.has_microbatch_id();
    seg_.key = event.microbatch_id();
  }
  TakeDeferred(&seg_);  // a resumed microbatch too
  seg_.owner = event.thread_id();
}

void Segmenter::SetAside() {
  // Its backward ran in a range that has ended: no later range of it is expected.
  if (!seg_.keyed || (seg_.ended && seg_.part_backward)) {
    close_(/*complete=*/true);
    return;
  }
  if (waiting_.size() >= kMaxParked) CloseWaiting(0);
  waiting_.push_back(std::move(seg_));
  seg_ = Segment();
}

bool Segmenter::Resume(uint64_t key) {
  auto it = std::find_if(waiting_.begin(), waiting_.end(),
                         [key](const Segment& seg) { return seg.key == key; });
  if (it == waiting_.end()) return false;
  seg_ = std::move(*it);
  waiting_.erase(it);
  seg_.ended = false;
  seg_.part_backward = false;
  return true;
}

void Segmenter::CloseWaiting(size_t i) {
  Segment current = std::move(seg_);
  seg_ = std::move(waiting_[i]);
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
  close_(/*complete=*/seg_.ended);
  seg_ = std::move(current);
}

void Segmenter::Defer(std::vector<std::string> modules) {
  for (std::string& m : modules) deferred_frozen_.push_back(std::move(m));
}

void Segmenter::TakeDeferred(Segment* seg) {
  for (std::string& m : deferred_frozen_) seg->frozen.push_back(std::move(m));
  deferred_frozen_.clear();
}

void Segmenter::Open(const v1::Event& event) {
  TakeDeferred(&seg_);
  seg_.open = true;
  seg_.step = step_;
  seg_.start_seq = seq_;
  seg_.start.CopyFrom(event);
  BoundEventStrings(&seg_.start);
  seg_.logged_seq = {seq_, seq_};
  seg_.probes_throughout = active_;
}

bool Segmenter::Assign(const v1::Event& event, uint32_t expect_forward, int* dir, bool* inferred) {
  const v1::EventKind kind = event.kind();
  *dir = kFwd;
  *inferred = false;
  switch (kind) {
    // Microbatch markers and optimizer steps.
    case v1::MICROBATCH_BEGIN:
      Begin(event);
      Remember(event);
      return false;
    case v1::MICROBATCH_END:
      if (markers_ && seg_.open && !seg_.ended) {
        seg_.ended = true;
      } else {
        unbalanced_(event, markers_ ? Unbalance::kEndAfterEnd : Unbalance::kEndBeforeBegin);
      }
      Remember(event);
      return false;
    case v1::STEP:
      if (!markers_) close_(/*complete=*/true);
      while (!waiting_.empty()) CloseWaiting(0);  // a step ends its keyed microbatches
      if (step_ < std::numeric_limits<uint32_t>::max()) ++step_;
      Remember(event);
      return false;
    // Where the next event of the Python hook happened: context only, it opens nothing.
    case v1::CALL_SITE:
      ctx_.Apply(event);
      Remember(event);
      return false;
    // Pass boundaries.
    case v1::BACKWARD_BEGIN:
      in_backward_ = true;
      if (!seg_.open) Open(event);
      seg_.backward_seen = true;
      seg_.part_backward = true;
      if (seg_.backward_passes < std::numeric_limits<uint32_t>::max()) ++seg_.backward_passes;
      backward_observed_ = true;
      Remember(event);
      return false;
    case v1::BACKWARD_END:
      in_backward_ = false;
      Remember(event);
      return false;
    default:
      break;
  }

  ctx_.Apply(event);
  const bool update = IsUpdate(kind);
  if (update)
    *dir = Direction(event, v1::UPDATE_FORWARD, v1::UPDATE_BACKWARD, in_backward_, inferred);
  const Activity activity = ActivityOf(event, update, *dir);
  if (!markers_ && seg_.open && !in_backward_ && !ctx_.InRecompute()) {
    if (activity.forward && seg_.backward_seen) {
      close_(/*complete=*/true);  // a return from backward to forward
    } else if (update && *dir == kFwd && !seg_.backward_seen && expect_forward > 0 &&
               seg_.count[kFwd] >= expect_forward) {
      close_(/*complete=*/true);  // another forward-only pass (evaluation)
    }
  }
  if (!seg_.open) Open(event);
  if (activity.forward) seg_.forward_seen = true;
  if (activity.backward) {
    seg_.backward_seen = true;
    seg_.part_backward = true;
    backward_observed_ = true;
  }
  if (kind == v1::MODULE_FORWARD || (kind == v1::MODULE_RECOMPUTE && event.fp8() == v1::FP8_ON)) {
    seg_.module_ran[kFwd] = true;
  }
  if (kind == v1::MODULE_BACKWARD) seg_.module_ran[kBwd] = true;
  if (kind == v1::MODULE_FORWARD) module_events_seen_[kFwd] = true;
  if (kind == v1::MODULE_BACKWARD) module_events_seen_[kBwd] = true;
  if (kind == v1::MODULE_RECOMPUTE) recompute_marks_seen_ = true;
  if (kind == v1::MODULE_RECOMPUTE) {
    seg_.recompute.Add(event, ctx_.site);
    ctx_.site.clear();  // a recompute's site locates that recompute alone
  }
  // Harmful where a forward update counted before it in this microbatch moved the scales.
  if (kind == v1::WEIGHT_REFRESH) seg_.refresh.Add(event, seg_.count[kFwd] > 0);
  // A module's first frozen scale in the run (its later ones say nothing new): see Defer.
  if (kind == v1::FROZEN_SCALE && frozen_.First(event.module())) {
    seg_.frozen.push_back(TruncateUtf8(event.module(), kMaxStoredString));
  }
  if (IsScopeExit(event) && seg_.scope_exits < std::numeric_limits<uint32_t>::max()) {
    ++seg_.scope_exits;
  }
  if (kind == v1::FIX_LOST_UPDATE && seg_.fix_lost++ == 0) {
    seg_.fix_lost_reason = TruncateUtf8(event.detail(), kMaxStoredString);
  }
  if (!update) Remember(event);
  return update;
}

void Segmenter::Stamp(uint64_t ts) {
  if (!seg_.open || ts == 0) return;
  if (seg_.first_ns == 0 || ts < seg_.first_ns) seg_.first_ns = ts;
  seg_.last_ns = std::max(seg_.last_ns, ts);
}

void Segmenter::CountOpen(uint64_t* ended, uint64_t* unfinished) const {
  auto tally = [&](const Segment& seg) {
    if (!seg.open || !seg.IsMicrobatch(markers_configured_)) return;
    ++*(seg.marked && seg.ended ? ended : unfinished);
  };
  tally(seg_);
  for (const Segment& seg : parked_) tally(seg);
  for (const Segment& seg : waiting_) tally(seg);
}

void Segmenter::CloseAll(bool complete_unmarked) {
  if (seg_.open) parked_.push_back(std::move(seg_));
  for (Segment& seg : waiting_) parked_.push_back(std::move(seg));
  waiting_.clear();
  std::stable_sort(parked_.begin(), parked_.end(),
                   [](const Segment& a, const Segment& b) { return a.start_seq < b.start_seq; });
  // The frozen scales deferred, and those of the segments after the last microbatch (which will
  // not be microbatches), go to that last microbatch: none follows it.
  const auto last = std::find_if(parked_.rbegin(), parked_.rend(), [this](const Segment& seg) {
    return seg.IsMicrobatch(markers_configured_);
  });
  const Segment* last_microbatch = last != parked_.rend() ? &*last : nullptr;
  if (last_microbatch != nullptr) {
    for (auto after = last.base(); after != parked_.end(); ++after) Defer(std::move(after->frozen));
  }
  for (Segment& seg : parked_) {
    const bool take = &seg == last_microbatch;
    seg_ = std::move(seg);
    if (take) TakeDeferred(&seg_);  // also those of segments before it that were no microbatch
    close_(markers_ ? seg_.ended : complete_unmarked);
  }
  parked_.clear();
  seg_ = Segment();
}

}  // namespace fp8audit::reports
