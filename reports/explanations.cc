#include "reports/explanations.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "fp8audit/vocabulary_proto.h"
#include "reports/event_text.h"
#include "reports/frozen_scales.h"
#include "state/semantics.h"

namespace fp8audit::reports {
namespace {

void AppendNumber(std::string* out, uint64_t n) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), n).ptr;
  out->append(buf, static_cast<size_t>(end - buf));
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

// "3" or "0, 4, 7, 9, 12, ..." (the first few of a listing).
std::string Listed(const Listing& listing) {
  std::string out;
  for (uint32_t i : listing.first) {
    if (!out.empty()) out += ", ";
    AppendNumber(&out, i);
  }
  if (listing.total > listing.first.size()) out += ", ...";
  return out;
}

}  // namespace

const char* DirWord(int dir) { return dir == kFwd ? "forward" : "backward"; }

void AppendUpdates(std::string* out, uint64_t n, int dir) {
  AppendNumber(out, n);
  *out += ' ';
  *out += DirWord(dir);
  *out += n == 1 ? " update" : " updates";
}

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

namespace {

// The direction an explanation line speaks of (kFwd, kBwd), or -1 for both: "3 forward updates,
// expected 1: ...", "forward updates 2-3, ...", "no forward update in this microbatch: ...",
// "... and 4 more extra forward updates".
int DirectionOf(const std::string& line) {
  size_t at = 0;
  if (line.starts_with("no ")) {
    at = 3;
  } else if (line.starts_with("... and ")) {
    const size_t extra = line.find(" more extra ");
    if (extra == std::string::npos) return -1;
    at = extra + 12;
  } else {
    while (at < line.size() && ((line[at] >= '0' && line[at] <= '9') || line[at] == ',')) ++at;
    if (at > 0 && at < line.size() && line[at] == ' ') ++at;
  }
  for (int dir : {kFwd, kBwd}) {
    const std::string word = std::string(DirWord(dir)) + " update";
    if (line.compare(at, word.size(), word) == 0) return dir;
  }
  return -1;
}

}  // namespace

google::protobuf::RepeatedPtrField<std::string> ExplanationsOf(
    const google::protobuf::RepeatedPtrField<std::string>& lines, int dir) {
  google::protobuf::RepeatedPtrField<std::string> kept;
  for (const std::string& line : lines) {
    const int of = DirectionOf(line);
    if (of < 0 || of == dir) *kept.Add() = line;
  }
  return kept;
}

std::string CountCause(uint64_t count, uint64_t expected, int dir, bool complete, bool frozen) {
  std::string cause;
  AppendUpdates(&cause, count, dir);
  cause += ", expected ";
  AppendNumber(&cause, expected);
  if (!complete) cause += " (incomplete microbatch)";
  if (frozen) cause += FrozenSuffix(dir);
  return cause;
}

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

const char* ApartExplanation(Apart apart) {
  switch (apart) {
    case Apart::kSplit:
      return kSplitRow;
    case Apart::kCrowded:
      return kCrowdedRow;
    default:
      return nullptr;
  }
}

std::string Where(const Context& ctx, const v1::Event& event, bool recompute, bool after_end,
                  bool inferred) {
  std::string where;
  if (const Frame* f = ctx.Shown(recompute); f != nullptr) {
    where = recompute ? "during recompute" : "during the original forward";
    where += " of " + std::string(CheckpointKindName(FromProto(f->kind))) + " checkpoint frame " +
             std::to_string(f->id);
  } else {
    where = "outside any checkpoint";
  }
  where += ", autocast depth " + std::to_string(ctx.autocast_depth);
  if (!ctx.module.empty()) where += ", after module " + Printable(ctx.module, 128);
  if (!ctx.site.empty()) where += ", Python " + Printable(ctx.site, 128);
  if (after_end) where += ", after the microbatch's end marker";
  if (inferred) where += ", direction inferred from pass boundaries";
  where += " (thread " + std::to_string(event.thread_id());
  if (!event.detail().empty()) {
    where += ", " + SourceName(event.source()) + " " + Printable(event.detail(), 160);
  }
  where += ")";
  return where;
}

std::string MissingFooterText(uint32_t next_index, uint64_t ended, uint64_t unfinished) {
  std::string what = "trace ends without a footer (the process was killed?)";
  const uint64_t whole = next_index + ended;
  if (unfinished == 1 && ended == 0) {
    what += ": microbatch " + std::to_string(next_index) + " unfinished";
  } else if (unfinished > 0) {
    what += ": " + std::to_string(unfinished) + " microbatches of threads unfinished";
  } else if (whole > 0) {
    what += " after microbatch " + std::to_string(whole - 1);
  } else {
    what += " before its first microbatch";
  }
  return what;
}

std::string UnbalancedMessage(Unbalance what, uint32_t next_index) {
  switch (what) {
    case Unbalance::kBeginWithoutEnd:
      return "microbatch " + std::to_string(next_index + 1) + " began while microbatch " +
             std::to_string(next_index) + " had no end marker";
    case Unbalance::kEndAfterEnd:
      return "microbatch end marker after microbatch " + std::to_string(next_index) +
             " had already ended";
    default:
      return "microbatch end marker before any begin marker";
  }
}

std::string ProbeNote(int dir, const std::string& disagreement, uint64_t counted) {
  std::string note = "probes disagree on ";
  note += DirWord(dir);
  note += " updates: " + disagreement + " (counted ";
  AppendNumber(&note, counted);
  note += ")";
  return note;
}

ChosenSemantics ChooseSemantics(const std::string& flag, const v1::Recording& rec) {
  if (!flag.empty()) {
    const auto given = state::ParseSemantics(flag);
    return {given ? std::string(state::SemanticsName(*given)) : flag,
            std::string(kSemanticsFromFlag)};
  }
  if (rec.te_patched()) {
    if (rec.patched_semantics().empty()) return {"fixed", std::string(kSemanticsFromPatch)};
    if (const auto applied = state::ParseSemantics(rec.patched_semantics())) {
      return {std::string(state::SemanticsName(*applied)), std::string(kSemanticsFromPatch)};
    }
  }
  if (const auto shown = state::ParseSemantics(rec.scheduling_semantics())) {
    return {std::string(state::SemanticsName(*shown)), std::string(kSemanticsFromScheduling)};
  }
  if (const auto te = state::SemanticsForTeVersion(rec.te_version())) {
    return {std::string(state::SemanticsName(*te)), std::string(kSemanticsFromTeVersion)};
  }
  return {};
}

std::string SemanticsLine(const ChosenSemantics& chosen, const std::string& te) {
  if (chosen.name.empty()) return {};
  std::string line = "model semantics " + chosen.name;
  if (chosen.from == kSemanticsFromFlag) {
    line += " (--semantics)";
  } else if (chosen.from == kSemanticsFromPatch) {
    line += " (TE " + (te.empty() ? std::string() : te + " ") + "patched by fp8audit.te)";
  } else if (chosen.from == kSemanticsFromScheduling) {
    line += " (from TE " + te + "'s scheduling: its backward update runs per autograd task)";
  } else {
    line += " (from TE " + te + ")";
  }
  if (chosen.from == kSemanticsFromScheduling) {
    return line +
           ": this Transformer Engine (its PR #3456) updates once at the end of each autograd "
           "task, so a logical microbatch whose backward runs as several backward() calls (a "
           "pipeline schedule, combined 1F1B, a run_backward per node) updates once per call; "
           "run them inside `with te.quantization_backward_scope():`, entered on every rank, "
           "for one update";
  }
  if (chosen.name != "fixed") {
    return line +
           ": Transformer Engine's own update ownership makes extra updates under activation "
           "checkpointing (its recompute and reentrant frames update again); `fp8audit model "
           "--semantics " +
           chosen.name +
           "` predicts a layout's counts, `fp8audit run --fix-te` applies the fixed ownership";
  }
  if (chosen.from == kSemanticsFromPatch) {
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

void AddRecordingNotes(const RecordingFacts& facts, v1::Recording* rec) {
  if (!facts.other_te_version.empty()) {
    rec->add_notes("Transformer Engine's version changed while the job ran: " + rec->te_version() +
                   ", then " + facts.other_te_version);
  }
  if (facts.disagreeing.total > 0) {
    rec->add_notes("probes disagree in " +
                   Plural(facts.disagreeing.total, "microbatch", "microbatches") + " (" +
                   Listed(facts.disagreeing) + ")");
  }
  if (facts.unfused.total > 0) {
    rec->add_notes(Plural(facts.unfused_updates, "update", "updates") + " in " +
                   Plural(facts.unfused.total, "microbatch", "microbatches") + " (" +
                   Listed(facts.unfused) +
                   ") came only from the Python hook: Transformer Engine's unfused update path "
                   "(NVTE_UNFUSED_FP8_UPDATE=1 or a callable amax or scale algorithm), where the "
                   "te-call and kernel probes see nothing");
  }
  if (facts.split.total > 0) {
    rec->add_notes("microbatches cannot be told apart: " +
                   Plural(facts.split.total, "microbatch range", "microbatch ranges") + " (" +
                   Listed(facts.split) + (facts.split.total == 1 ? ") holds" : ") hold") +
                   " a backward pass without its forward, as a pipeline schedule (1F1B, "
                   "interleaved) runs a later microbatch's forward before this one's backward, "
                   "and the ranges name no microbatch: their counts are not per logical "
                   "microbatch; " +
                   kRemedy);
  }
  if (facts.crowded.total > 0) {
    rec->add_notes(
        "microbatches cannot be told apart: " + Plural(facts.crowded.total, "cut", "cuts") + " (" +
        Listed(facts.crowded) + (facts.crowded.total == 1 ? ") holds" : ") hold") +
        " several backward passes, as a pipeline schedule (1F1B, interleaved) "
        "runs later microbatches' forwards before earlier ones' backwards: without "
        "markers the counts are not per logical microbatch; " +
        kRemedy);
  }
  if (facts.unmarked_failures) {
    rec->add_notes(
        "no fp8audit.microbatch markers in this trace: microbatches were cut where work returned "
        "to the training thread after a backward pass, so one cut can hold more than one logical "
        "microbatch (a forward without its backward, a test session's unrelated passes); mark them "
        "(with fp8audit.microbatch():) for exact counts, or judge a pytest session per test "
        "(pytest --fp8audit)");
  }
}

}  // namespace fp8audit::reports
