#include "state/explain.h"

#include <unordered_map>

namespace fp8audit::state {

namespace {

std::string FrameName(uint32_t frame, uint32_t first_frame, CheckpointKind kind) {
  return "checkpoint frame " + std::to_string(frame >= first_frame ? frame - first_frame + 1 : 0) +
         " (" + std::string(CheckpointKindName(kind)) + ")";
}

std::string ModuleName(const CompiledScenario& sc, uint32_t module) {
  return module < sc.modules.size() ? "'" + sc.modules[module].name + "'" : "?";
}

// What the update did to the state: harmful (advanced modules) or wasted (a no-op).
std::string Effect(uint32_t advanced) {
  if (advanced == 0)
    return " [wasted: no amax was written since the last update; changes no state]";
  return " [harmful: advances " + std::to_string(advanced) +
         (advanced == 1 ? " module's" : " modules'") + " amax history and scale]";
}

}  // namespace

std::vector<std::string> Explain(const CompiledScenario& sc, const std::vector<ModelEvent>& events,
                                 size_t begin, uint32_t first_frame, uint64_t expect_forward,
                                 uint64_t expect_backward, uint64_t forward_updates,
                                 uint64_t backward_updates) {
  std::vector<std::string> out;
  // Frame kinds by id, for naming frames in origins.
  std::unordered_map<uint32_t, CheckpointKind> kinds;
  for (size_t i = begin; i < events.size(); ++i) {
    if (events[i].kind == v1::CHECKPOINT_ENTER)
      kinds.emplace(events[i].frame, events[i].checkpoint_kind);
  }
  auto kind_of = [&](uint32_t frame) {
    auto it = kinds.find(frame);
    return it == kinds.end() ? CheckpointKind::kReentrant : it->second;
  };
  uint64_t nf = 0, nb = 0;
  for (size_t i = begin; i < events.size(); ++i) {
    const ModelEvent& e = events[i];
    if (e.kind == v1::UPDATE_FORWARD) {
      ++nf;
      if (nf <= expect_forward) continue;
      std::string text = "extra forward update " + std::to_string(nf) + "/" +
                         std::to_string(forward_updates) + ": ";
      if (e.cause.frame) {
        text += "recompute of " + FrameName(e.cause.frame, first_frame, kind_of(e.cause.frame)) +
                ", autocast exit at depth 0 opened a new forward-update boundary";
      } else {
        text += "autocast exit at depth 0";
      }
      text += Effect(e.cause.advanced);
      out.push_back(std::move(text));
    } else if (e.kind == v1::UPDATE_BACKWARD) {
      ++nb;
      if (nb <= expect_backward) continue;
      const UpdateCause& c = e.cause;
      std::string text = "extra backward update " + std::to_string(nb) + "/" +
                         std::to_string(backward_updates) + ": ";
      if (c.kind == UpdateCause::Kind::kTaskEnd || c.kind == UpdateCause::Kind::kScopeExit) {
        text += c.kind == UpdateCause::Kind::kScopeExit ? "exit of the outermost backward scope"
                : c.frame ? "end of the nested backward (its own autograd task) of " +
                                FrameName(c.frame, first_frame, kind_of(c.frame))
                          : "end of an autograd task (a backward() call)";
        text += ", last requested by module " + ModuleName(sc, c.module) + Effect(c.advanced);
        out.push_back(std::move(text));
        continue;
      }
      text +=
          "backward of module " + ModuleName(sc, c.module) + ", which took first-module ownership";
      if (c.owner_frame) {
        text +=
            " during recompute of " + FrameName(c.owner_frame, first_frame, kind_of(c.owner_frame));
      }
      switch (c.origin.source) {
        case OwnerSource::kRecomputeBoundary:
          text += "; the recompute autocast re-armed the flag at depth 0";
          break;
        case OwnerSource::kQueuePop:
          text += "; the frame restored a first-module flag saved at checkpoint entry";
          break;
        case OwnerSource::kReservation:
          text += "; the frame handed out its reserved ownership";
          break;
        case OwnerSource::kAutocastBoundary:
          text += "; the flag came from the autocast boundary";
          break;
        case OwnerSource::kNone:
          break;
      }
      if (c.owner_restored) text += ", and the recompute phase put the flag back after reading it";
      text += Effect(c.advanced);
      out.push_back(std::move(text));
    }
  }
  if (forward_updates < expect_forward) {
    out.push_back("missing forward update: " + std::to_string(forward_updates) + " of " +
                  std::to_string(expect_forward) +
                  " (no enabled autocast exited at depth 0 with grad enabled); harmful: the " +
                  "forward scales froze, this microbatch's amaxes never reach them");
  }
  if (backward_updates < expect_backward) {
    out.push_back("missing backward update: " + std::to_string(backward_updates) + " of " +
                  std::to_string(expect_backward) +
                  " (no module that ran with grad enabled owned the update); harmful: the " +
                  "backward scales froze, this microbatch's gradient amaxes never reach them");
  }
  return out;
}

}  // namespace fp8audit::state
