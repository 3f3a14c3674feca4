// Chrome Trace Event Format (the JSON Object Format, {"traceEvents": [...], "otherData": {...}}),
// written while the traces are read, for Perfetto UI and chrome://tracing. Event timing comes from
// the traces; every judgement (microbatches, verdicts, which updates are extra and why) is the
// auditor's, handed over through TraceObserver.
//
// Layout: one process per trace (pid 1, 2, ... in reading order, named by rank, host and pid); in
// it one track for the audit's microbatches with their forward and backward passes (complete
// events, nested), and one track per recording thread (tids from 16,777,216 up, unique across
// processes) with checkpoint frames and autocast regions as B/E slices, every FP8 state update and
// every other recorded event as an instant. Slices on a track nest perfectly (Perfetto displays
// nothing else): an exit closes the slices opened after its enter, a slice left open closes at
// its thread's last event, and a thread's timestamps never go back.
//
// Keys: "ts" comes first in each event, then "ph", "pid", "tid", before any string or array, so
// that readers which scan for "ts" without a full JSON parser (older trace processors) find it.
// Strings are escaped by nlohmann::json; trace strings that the recorder stored escaped (not
// UTF-8) stay escaped, and the args list them.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reports/event_text.h"
#include "reports/render.h"
#include "reports/render_util.h"
#include "reports/verdicts.h"

namespace fp8audit::reports {
namespace {

using Json = nlohmann::ordered_json;
namespace pb = ::google::protobuf;

constexpr size_t kMaxThreads = 256;         // thread tracks per trace; later threads share one
constexpr size_t kMaxDepth = 64;            // open slices per thread track
constexpr size_t kMaxPendingBackward = 64;  // backward passes waiting for their microbatch
constexpr int kMaxListed = 100;             // problems and job violations in otherData
constexpr uint32_t kFirstThreadTid = 1u << 24;
constexpr size_t kMaxName = 160;  // bytes of trace text in an event's name
// Microbatch slices held back while no microbatch of the job had an update (their verdict waits
// for the outcome: nothing audited, or a failure); past this many they are written as the audit
// judged each microbatch.
constexpr size_t kMaxHeld = 4096;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Microseconds with up to three decimals (nanosecond precision), e.g. "12.5", "3".
void AppendMicros(uint64_t ns, std::string* out) {
  *out += std::to_string(ns / 1000);
  uint64_t frac = ns % 1000;
  if (frac == 0) return;
  char digits[4] = {static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                    static_cast<char>('0' + frac % 10), '\0'};
  int n = 3;
  while (digits[n - 1] == '0') --n;
  *out += '.';
  out->append(digits, static_cast<size_t>(n));
}

// Every field a message holds (proto3: those not at their default), by its .proto name, but for
// those the event shows otherwise (`shown`: the field numbers, as bits): enums by name, strings
// cut to kMaxStoredString. escaped_fields becomes the names of the escaped fields.
Json Recorded(const pb::Message& m, uint64_t shown = 0) {
  Json j = Json::object();
  const pb::Reflection* refl = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    if (f->number() < 64 && (shown >> f->number() & 1) != 0) continue;
    if (f->is_repeated()) {
      Json list = Json::array();
      for (int i = 0; i < refl->FieldSize(m, f) && i < 64; ++i) {
        if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING) {
          list.push_back(TruncateUtf8(refl->GetRepeatedString(m, f, i), kMaxStoredString));
        }
      }
      j[f->name()] = std::move(list);
      continue;
    }
    if (f->name() == "escaped_fields") {
      Json names = Json::array();
      const uint64_t bits = refl->GetUInt64(m, f);
      for (int n = 1; n < 64; ++n) {
        if ((bits >> n & 1) == 0) continue;
        const pb::FieldDescriptor* e = m.GetDescriptor()->FindFieldByNumber(n);
        names.push_back(e != nullptr ? e->name() : "field " + std::to_string(n));
      }
      j["escaped_fields"] = std::move(names);
      continue;
    }
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_STRING:
        j[f->name()] = TruncateUtf8(refl->GetString(m, f), kMaxStoredString);
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        j[f->name()] = refl->GetEnum(m, f)->name();
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        j[f->name()] = refl->GetUInt64(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        j[f->name()] = refl->GetUInt32(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        j[f->name()] = refl->GetInt64(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        j[f->name()] = refl->GetInt32(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        j[f->name()] = refl->GetBool(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        j[f->name()] = refl->GetDouble(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        j[f->name()] = refl->GetFloat(m, f);
        break;
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        j[f->name()] = Recorded(refl->GetMessage(m, f));
        break;
    }
  }
  return j;
}

// An event's fields its track already shows: the thread (the track's name).
constexpr uint64_t kOnTrack = uint64_t{1} << v1::Event::kThreadIdFieldNumber;
// And an update's: its kernel or call, and its count.
constexpr uint64_t kInUpdateArgs = kOnTrack | uint64_t{1} << v1::Event::kDetailFieldNumber |
                                   uint64_t{1} << v1::Event::kCountFieldNumber;

bool IsUpdate(v1::EventKind kind) {
  return kind == v1::UPDATE_FORWARD || kind == v1::UPDATE_BACKWARD || kind == v1::UPDATE;
}

// The category of an event that is neither an update nor a slice.
const char* Category(v1::EventKind kind) {
  switch (kind) {
    case v1::MICROBATCH_BEGIN:
    case v1::MICROBATCH_END:
    case v1::STEP:
      return "marker";
    case v1::BACKWARD_BEGIN:
    case v1::BACKWARD_END:
      return "pass";
    case v1::EXCEPTION:
    case v1::VIOLATION:
      return "problem";
    case v1::CROSSCHECK_UPDATE_FORWARD:
    case v1::CROSSCHECK_UPDATE_BACKWARD:
    case v1::CROSSCHECK_UPDATE:
      return "crosscheck";
    case v1::TE_VERSION:
    case v1::TE_PATCHED:
    case v1::PROBES:
      return "recording";
    default:
      return "context";
  }
}

class ChromeTrace final : public StreamRenderer {
 public:
  explicit ChromeTrace(OutputStream* out) : out_(out) {}

  void Begin(const std::vector<std::string>& files) override;
  bool WantsClocks() const override { return true; }
  void OnClocks(const ClockAlignment& clocks) override;
  void OnTrace(size_t index, const std::string& path) override;
  void OnEvent(const v1::Event& event) override;
  void OnUpdate(const CountedUpdate& update) override;
  void OnMicrobatch(const v1::MicrobatchResult& row, const MicrobatchSpan& span) override;
  void OnViolation(const v1::Violation& violation) override;
  void OnTraceEnd(const v1::RankReport& report) override;
  void Finish(const TraceSetResult& result) override;

 private:
  // How a trace's steady-clock nanoseconds map onto the file's time line.
  struct Clock {
    uint64_t base_ns = 0;    // subtracted: the first event of the trace's host
    uint64_t offset_ns = 0;  // added: how much later the host started than the first host
  };
  struct Open {
    bool checkpoint = false;  // else autocast
    uint64_t frame = 0;
  };
  struct Thread {
    uint32_t tid = 0;
    uint64_t os_tid = 0;
    size_t order = 0;   // first appearance
    uint64_t last = 0;  // latest time on this track (file time line, ns)
    std::vector<Open> open;
    bool autograd = false;  // backward began on it
    bool training = false;  // backward ended on it
    bool shared = false;    // the track of the threads beyond kMaxThreads: instants only
  };
  struct Backward {
    uint64_t begin_ns = 0;  // the trace's clock
    uint64_t end_ns = 0;    // 0: not ended yet
  };
  // A microbatch slice held back, and its passes' events (formatted).
  struct Held {
    size_t trace = 0;
    uint32_t pid = 0;
    uint64_t ts = 0;
    uint64_t dur = 0;
    std::string name;  // without the verdict
    v1::Verdict verdict = v1::VERDICT_UNSPECIFIED;
    Json args;
    std::string passes;
  };
  // A trace's process, named once the job's outcome is known.
  struct Process {
    uint32_t pid = 0;
    std::string path;
    std::string title;  // without the verdict
    v1::Verdict verdict = v1::VERDICT_UNSPECIFIED;
  };

  uint64_t Rel(uint64_t ns);
  Thread& ThreadOf(uint64_t os_tid);
  uint64_t At(Thread& t, uint64_t ns);
  void Emit(char ph, uint64_t ts, uint32_t tid, std::string_view name, std::string_view cat,
            const Json* args, const uint64_t* dur = nullptr, char scope = 0);
  void Meta(uint32_t tid, const char* name, Json args);
  void CloseAbove(Thread& t, size_t keep, uint64_t ts);
  void Slice(Thread& t, const v1::Event& e, uint64_t ts, bool checkpoint, bool enter);
  void MicrobatchSlice(uint32_t pid, uint64_t ts, uint64_t dur, const std::string& name, Json* args,
                       VerdictName verdict);
  // Writes the held slices, with the verdict the audit gave each in its trace (`outcomes`: each
  // file's trace outcome; null: not known yet). Holds nothing more.
  void Flush(const std::vector<v1::AuditReport::Outcome>* outcomes);

  OutputStream* out_;
  bool first_ = true;
  std::string line_;
  std::string* capture_ = nullptr;  // Emit appends here instead of writing (a held slice's passes)
  bool holding_ = true;             // no microbatch with an update yet
  std::vector<Held> held_;
  uint64_t written_early_ = 0;  // slices written before the outcome, past kMaxHeld
  std::vector<Process> processes_;
  std::vector<Clock> clocks_;
  std::string clock_note_;
  uint32_t next_tid_ = kFirstThreadTid;

  // The trace being read.
  uint32_t pid_ = 0;
  Clock clock_;
  std::unordered_map<uint64_t, Thread> threads_;
  Thread shared_;
  std::deque<Backward> backward_;
  uint64_t mb_end_ = 0;  // end of the last microbatch slice
  uint64_t last_ = 0;    // latest time in the trace

  // What was cut or bent to keep the file valid and bounded, over all traces.
  uint64_t clamped_ = 0;
  uint64_t closed_early_ = 0;
  uint64_t left_open_ = 0;
  uint64_t unmatched_exits_ = 0;
  uint64_t too_deep_ = 0;
  uint64_t shared_traces_ = 0;
  uint64_t backward_dropped_ = 0;
};

void ChromeTrace::Begin(const std::vector<std::string>& /*files*/) {
  out_->Write("{\"traceEvents\":[\n");
}

void ChromeTrace::OnClocks(const ClockAlignment& clocks) {
  clocks_.clear();
  for (const TraceClock& c : clocks.traces) clocks_.push_back(Clock{c.base_ns, c.offset_ns});
  if (clocks.hosts <= 1) {
    clock_note_ =
        "microseconds from the first event; the traces' monotonic clock, which the processes of "
        "one host share";
  } else {
    clock_note_ = "microseconds from the first event; " + std::to_string(clocks.hosts) +
                  " hosts, each on its own monotonic clock, aligned by the start times their "
                  "traces record (to within how long each took from its start to its first "
                  "event)";
    if (clocks.unaligned_host) {
      clock_note_ += "; a host whose traces record no start time is not aligned";
    }
  }
}

void ChromeTrace::OnTrace(size_t index, const std::string& path) {
  pid_ = static_cast<uint32_t>(index + 1);
  processes_.push_back(Process{pid_, path, "", v1::VERDICT_UNSPECIFIED});
  clock_ = index < clocks_.size() ? clocks_[index] : Clock{};
  threads_.clear();
  shared_ = Thread{};
  backward_.clear();
  mb_end_ = 0;
  last_ = 0;
}

uint64_t ChromeTrace::Rel(uint64_t ns) {
  if (ns == 0) return last_;  // not recorded: where the trace is
  uint64_t rel = 0;
  if (ns >= clock_.base_ns) {
    rel = ns - clock_.base_ns + clock_.offset_ns;
  } else if (clock_.base_ns - ns <= clock_.offset_ns) {
    rel = clock_.offset_ns - (clock_.base_ns - ns);
  } else {
    ++clamped_;  // before the first event the probe saw
  }
  last_ = std::max(last_, rel);
  return rel;
}

ChromeTrace::Thread& ChromeTrace::ThreadOf(uint64_t os_tid) {
  auto it = threads_.find(os_tid);
  if (it != threads_.end()) return it->second;
  if (threads_.size() >= kMaxThreads) {
    if (shared_.tid == 0) {
      shared_.tid = next_tid_++;
      shared_.shared = true;
      shared_.order = kMaxThreads;
      ++shared_traces_;
    }
    return shared_;
  }
  Thread& t = threads_[os_tid];
  t.tid = next_tid_++;
  t.os_tid = os_tid;
  t.order = threads_.size() - 1;
  return t;
}

uint64_t ChromeTrace::At(Thread& t, uint64_t ns) {
  t.last = std::max(t.last, Rel(ns));
  return t.last;
}

void ChromeTrace::Emit(char ph, uint64_t ts, uint32_t tid, std::string_view name,
                       std::string_view cat, const Json* args, const uint64_t* dur, char scope) {
  line_.clear();
  line_ += first_ && capture_ == nullptr ? "{\"ts\":" : ",\n{\"ts\":";
  if (capture_ == nullptr) first_ = false;
  AppendMicros(ts, &line_);
  line_ += ",\"ph\":\"";
  line_ += ph;
  line_ += "\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid);
  if (dur != nullptr) {
    line_ += ",\"dur\":";
    AppendMicros(*dur, &line_);
  }
  if (scope != 0) {
    line_ += ",\"s\":\"";
    line_ += scope;
    line_ += '"';
  }
  if (!cat.empty()) line_ += ",\"cat\":" + Dump(Json(std::string(cat)));
  line_ += ",\"name\":" + Dump(Json(Printable(name, kMaxName)));
  if (args != nullptr) line_ += ",\"args\":" + Dump(*args);
  line_ += '}';
  if (capture_ != nullptr) {
    *capture_ += line_;
  } else {
    out_->Write(line_);
  }
}

void ChromeTrace::Meta(uint32_t tid, const char* name, Json args) {
  Emit('M', 0, tid, name, "", &args);
}

void ChromeTrace::CloseAbove(Thread& t, size_t keep, uint64_t ts) {
  while (t.open.size() > keep) {
    Emit('E', ts, t.tid, "", "", nullptr);
    t.open.pop_back();
  }
}

void ChromeTrace::Slice(Thread& t, const v1::Event& e, uint64_t ts, bool checkpoint, bool enter) {
  const Json args = {{"event", Recorded(e, kOnTrack)}};
  if (enter) {
    std::string name = checkpoint ? "checkpoint frame " + std::to_string(e.frame()) + " (" +
                                        PhaseName(e.checkpoint_phase()) + ")"
                                  : "autocast depth " + std::to_string(e.autocast_depth());
    if (t.shared || t.open.size() >= kMaxDepth) {
      if (!t.shared) ++too_deep_;
      Emit('i', ts, t.tid, KindName(e.kind()), checkpoint ? "checkpoint" : "autocast", &args,
           nullptr, 't');
      return;
    }
    Emit('B', ts, t.tid, name, checkpoint ? "checkpoint" : "autocast", &args);
    t.open.push_back(Open{checkpoint, e.frame()});
    return;
  }
  // The innermost open slice this exit closes: its frame's, or the innermost autocast region.
  size_t k = t.open.size();
  while (k > 0) {
    const Open& o = t.open[k - 1];
    if (o.checkpoint == checkpoint && (!checkpoint || o.frame == e.frame())) break;
    --k;
  }
  if (k == 0) {
    if (!t.shared) ++unmatched_exits_;
    Emit('i', ts, t.tid, KindName(e.kind()) + (t.shared ? "" : " (no open enter)"),
         checkpoint ? "checkpoint" : "autocast", &args, nullptr, 't');
    return;
  }
  closed_early_ += t.open.size() - k;
  CloseAbove(t, k - 1, ts);
}

void ChromeTrace::OnEvent(const v1::Event& e) {
  const v1::EventKind kind = e.kind();
  if (IsUpdate(kind)) return;  // OnUpdate shows it, with the audit's words
  Thread& t = ThreadOf(e.thread_id());
  const uint64_t ts = At(t, e.timestamp_ns());
  switch (kind) {
    case v1::CHECKPOINT_ENTER:
    case v1::CHECKPOINT_EXIT:
      Slice(t, e, ts, true, kind == v1::CHECKPOINT_ENTER);
      return;
    case v1::AUTOCAST_ENTER:
    case v1::AUTOCAST_EXIT:
      Slice(t, e, ts, false, kind == v1::AUTOCAST_ENTER);
      return;
    case v1::BACKWARD_BEGIN:
      t.autograd = true;
      if (e.timestamp_ns() != 0 && (backward_.empty() || backward_.back().end_ns != 0)) {
        if (backward_.size() >= kMaxPendingBackward) {
          backward_.pop_front();
          ++backward_dropped_;
        }
        backward_.push_back(Backward{e.timestamp_ns(), 0});
      }
      break;
    case v1::BACKWARD_END:
      t.training = true;
      if (!backward_.empty() && backward_.back().end_ns == 0) {
        backward_.back().end_ns = std::max(e.timestamp_ns(), backward_.back().begin_ns);
      }
      break;
    default:
      break;
  }
  std::string name = KindName(kind);
  if (!e.module().empty()) name += " " + Printable(e.module(), kMaxName);
  const std::string category = Category(kind);
  if (category == "crosscheck") name += " (" + SourceName(e.source()) + ")";
  if (category == "recording") name += " " + FactText(e);
  const Json args = {{"event", Recorded(e, kOnTrack)}};
  Emit('i', ts, t.tid, name, category, &args, nullptr, 't');
}

void ChromeTrace::OnUpdate(const CountedUpdate& u) {
  const v1::Event& e = *u.event;
  Thread& t = ThreadOf(e.thread_id());
  const uint64_t ts = At(t, e.timestamp_ns());
  const bool extra = u.last > u.expected;
  const std::string direction = PassName(u.direction);
  Json args = Json::object();
  args["microbatch"] = u.microbatch;
  args["direction"] = direction;
  if (u.inferred) args["direction_from"] = "pass boundaries (the update recorded none)";
  args["number"] = u.first == u.last ? std::to_string(u.first)
                                     : std::to_string(u.first) + "-" + std::to_string(u.last);
  args["expected"] = u.expected;
  args["extra"] = extra;
  if (!u.where.empty()) args["explanation"] = std::string(u.where);
  if (!e.detail().empty()) {
    args[e.source() == v1::KERNEL ? "kernel" : "call"] = TruncateUtf8(e.detail(), kMaxStoredString);
  }
  args["count"] = e.count() == 0 ? 1 : e.count();
  args["probe"] = SourceName(e.source());
  args["event"] = Recorded(e, kInUpdateArgs);
  Emit('i', ts, t.tid, direction + " update" + (extra ? " (extra)" : ""),
       extra ? "update,extra" : "update", &args, nullptr, 't');
}

void ChromeTrace::OnMicrobatch(const v1::MicrobatchResult& row, const MicrobatchSpan& span) {
  // The microbatch, then its passes inside it: one after another, never overlapping.
  const uint64_t a = std::max(span.first_ns != 0 ? Rel(span.first_ns) : last_, mb_end_);
  const uint64_t b = std::max(span.last_ns != 0 ? Rel(span.last_ns) : last_, a);
  Json args = Json::object();
  args["microbatch"] = row.index();
  args["step"] = row.step();
  args["forward"] = row.forward_updates();
  args["backward"] = row.backward_updates();
  args["expected_forward"] = row.expected_forward();
  args["expected_backward"] = row.expected_backward();
  args["verdict"] = "";  // MicrobatchSlice
  if (row.explanations_size() > 0) {
    Json ex = Json::array();
    for (const std::string& e : row.explanations()) ex.push_back(TruncateUtf8(e, 4096));
    args["explanations"] = std::move(ex);
  }
  if (row.has_by_source()) args["by_source"] = Recorded(row.by_source());
  if (row.probe_notes_size() > 0) {
    Json notes = Json::array();
    for (const std::string& n : row.probe_notes()) notes.push_back(TruncateUtf8(n, 4096));
    args["probe_notes"] = std::move(notes);
  }
  const uint64_t dur = b - a;
  std::string name =
      "microbatch " + std::to_string(row.index()) + " (step " + std::to_string(row.step()) + ")";
  Held* held = nullptr;
  if (holding_ && row.forward_updates() == 0 && row.backward_updates() == 0) {
    if (held_.size() < kMaxHeld) {
      held_.push_back(Held{processes_.empty() ? 0 : processes_.size() - 1, pid_, a, dur,
                           std::move(name), row.verdict(), std::move(args), ""});
      held = &held_.back();
      capture_ = &held->passes;
    } else {
      written_early_ += held_.size() + 1;
    }
  }
  if (held == nullptr) {
    // An update (or too many held): the job's outcome is not nothing audited, or too late to wait.
    Flush(nullptr);
    MicrobatchSlice(pid_, a, dur, name, &args,
                    MicrobatchVerdict(row, v1::AuditReport::OUTCOME_UNSPECIFIED));
  }
  mb_end_ = b;

  // Backward passes recorded up to the microbatch's last event, clamped into it.
  std::vector<std::pair<uint64_t, uint64_t>> passes;
  uint64_t cursor = a;
  while (!backward_.empty() && backward_.front().begin_ns <= span.last_ns) {
    Backward& p = backward_.front();
    if (p.end_ns != 0 && p.end_ns < span.first_ns) {
      backward_.pop_front();  // before this microbatch: in no microbatch
      continue;
    }
    const uint64_t begin = std::clamp(Rel(p.begin_ns), cursor, b);
    const bool ended = p.end_ns != 0 && p.end_ns <= span.last_ns;
    const uint64_t end = ended ? std::clamp(Rel(p.end_ns), begin, b) : b;
    passes.emplace_back(begin, end);
    cursor = end;
    if (!ended) {
      p.begin_ns = span.last_ns;  // it goes on in the next microbatch
      break;
    }
    backward_.pop_front();
  }
  if (!span.backward_seen) {
    passes.clear();
    uint64_t d = b - a;
    const Json fa = {{"microbatch", row.index()}, {"note", "forward-only: no backward activity"}};
    Emit('X', a, pid_, "forward", "pass", &fa, &d);
    capture_ = nullptr;
    return;
  }
  const Json pa = {{"microbatch", row.index()}};
  if (!passes.empty() && passes.front().first > a) {
    uint64_t d = passes.front().first - a;
    Emit('X', a, pid_, "forward", "pass", &pa, &d);
  }
  for (const auto& [begin, end] : passes) {
    uint64_t d = end - begin;
    Emit('X', begin, pid_, "backward", "pass", &pa, &d);
  }
  capture_ = nullptr;
}

void ChromeTrace::MicrobatchSlice(uint32_t pid, uint64_t ts, uint64_t dur, const std::string& name,
                                  Json* args, VerdictName verdict) {
  const bool fail = verdict == VerdictName::kFail;
  (*args)["verdict"] = std::string(Word(verdict));
  const uint32_t current = pid_;
  pid_ = pid;
  Emit('X', ts, pid, name + ": " + std::string(Word(verdict)),
       fail ? "microbatch,fail" : "microbatch", args, &dur);
  pid_ = current;
}

void ChromeTrace::Flush(const std::vector<v1::AuditReport::Outcome>* outcomes) {
  holding_ = false;
  for (Held& h : held_) {
    const auto outcome = outcomes != nullptr && h.trace < outcomes->size()
                             ? (*outcomes)[h.trace]
                             : v1::AuditReport::OUTCOME_UNSPECIFIED;
    v1::MicrobatchResult row;
    row.set_verdict(h.verdict);
    MicrobatchSlice(h.pid, h.ts, h.dur, h.name, &h.args, MicrobatchVerdict(row, outcome));
    out_->Write(h.passes);
  }
  held_.clear();
  held_.shrink_to_fit();
}

void ChromeTrace::OnViolation(const v1::Violation& v) {
  // Counts are shown by their microbatch's slice; the job's disagreements in otherData.
  if (IsCountViolation(v) || v.kind() == v1::Violation::RANK_DISAGREEMENT) return;
  const uint64_t ts = v.context_size() > 0 && v.context(0).timestamp_ns() != 0
                          ? Rel(v.context(0).timestamp_ns())
                          : last_;
  const Json args = {{"kind", ViolationKindName(v.kind())},
                     {"microbatch", v.microbatch()},
                     {"message", TruncateUtf8(v.message(), 4096)}};
  Emit('i', ts, pid_, "violation: " + ViolationKindName(v.kind()), "violation", &args, nullptr,
       'p');
}

void ChromeTrace::OnTraceEnd(const v1::RankReport& report) {
  std::vector<Thread*> tracks;
  for (auto& [os_tid, t] : threads_) tracks.push_back(&t);
  if (shared_.tid != 0) tracks.push_back(&shared_);
  std::sort(tracks.begin(), tracks.end(),
            [](const Thread* x, const Thread* y) { return x->order < y->order; });
  for (Thread* t : tracks) {
    left_open_ += t->open.size();
    CloseAbove(*t, 0, t->last);
  }
  // Named in Finish, with the job's outcome.
  if (!processes_.empty()) {
    Process& p = processes_.back();
    p.title = RankTitle(report);
    p.verdict = report.verdict();
  }
  Meta(pid_, "process_sort_index", {{"sort_index", report.rank()}});
  // Perfetto shows the labels beside the process's name: the path and how it was recorded.
  std::string label = Printable(report.path(), 512);
  if (const std::string probes = ProbesText(report.recording()); !probes.empty()) {
    label += ", probes " + probes;
  }
  if (const std::string te = TeText(report.recording()); !te.empty()) label += ", TE " + te;
  Json labels = {{"labels", label}};
  Meta(pid_, "process_labels", labels);
  Meta(pid_, "thread_name", {{"name", "fp8audit: microbatches and passes"}});
  Meta(pid_, "thread_sort_index", {{"sort_index", -1}});
  for (const Thread* t : tracks) {
    std::string name;
    if (t->shared) {
      name = "threads beyond the first " + std::to_string(kMaxThreads);
    } else {
      name = "thread " + std::to_string(t->os_tid);
      if (t->training && !t->autograd) name += " (training thread)";
      if (t->autograd && !t->training) name += " (autograd thread)";
    }
    Meta(t->tid, "thread_name", {{"name", name}});
    Meta(t->tid, "thread_sort_index", {{"sort_index", static_cast<int64_t>(t->order)}});
  }
}

void ChromeTrace::Finish(const TraceSetResult& result) {
  const v1::AuditReport& report = result.report;
  Flush(&result.file_outcomes);
  for (size_t i = 0; i < processes_.size(); ++i) {
    const Process& p = processes_[i];
    const auto outcome = i < result.file_outcomes.size() ? result.file_outcomes[i]
                                                         : v1::AuditReport::OUTCOME_UNSPECIFIED;
    pid_ = p.pid;
    Meta(p.pid, "process_name",
         {{"name", p.title + ": " + std::string(Word(OutcomeVerdict(outcome, p.verdict)))}});
  }
  Json other = Json::object();
  other["fp8audit"] = FP8AUDIT_VERSION;
  other["outcome"] = std::string(Word(JobVerdict(report)));
  other["totals"] = TotalsLine(report.totals());
  other["time"] = clock_note_;
  other["tracks"] =
      "per trace (process): the audit's microbatches with their forward and backward passes, "
      "then one track per recording thread with its checkpoint frames and autocast regions, its "
      "FP8 state updates (extra ones in category 'extra', with the audit's explanation) and the "
      "other recorded events";
  Json problems = Json::array();
  for (int i = 0; i < report.problems_size() && i < kMaxListed; ++i) {
    problems.push_back(TruncateUtf8(report.problems(i), 4096));
  }
  if (report.problems_size() > kMaxListed) {
    problems.push_back("... and " + std::to_string(report.problems_size() - kMaxListed) + " more");
  }
  if (!problems.empty()) other["problems"] = std::move(problems);
  Json job = Json::array();
  for (int i = 0; i < report.violations_size() && i < kMaxListed; ++i) {
    job.push_back(TruncateUtf8(report.violations(i).message(), 4096));
  }
  if (!job.empty()) other["job_violations"] = std::move(job);
  Json notes = Json::array();
  auto note = [&](uint64_t n, const std::string& what) {
    if (n > 0) notes.push_back(std::to_string(n) + " " + what);
  };
  note(clamped_, "events earlier than their trace's first events were placed at its start");
  note(closed_early_, "slices closed at an exit of a slice that enclosed them (not nested)");
  note(left_open_, "slices still open at the end of their trace closed at its thread's last event");
  note(unmatched_exits_, "exits without an open enter shown as instants");
  note(too_deep_, "enters beyond a depth of 64 shown as instants");
  note(shared_traces_,
       "traces with more than 256 recording threads: the later threads share one track");
  note(backward_dropped_, "backward passes not placed (more than 64 outside a microbatch)");
  if (report.outcome() == v1::AuditReport::OUTCOME_NOTHING_AUDITED) {
    note(written_early_,
         "microbatches without an update were written as the audit judged each, before the "
         "outcome was known (more than 4096 wait for it): nothing was audited, a 'fail' among "
         "them is no finding");
  }
  if (!notes.empty()) other["notes"] = std::move(notes);
  out_->Write("\n],\n\"otherData\":" + Dump(other) + "}\n");
}

}  // namespace

std::unique_ptr<StreamRenderer> MakeChromeTraceRenderer(OutputStream* out) {
  return std::make_unique<ChromeTrace>(out);
}

}  // namespace fp8audit::reports
