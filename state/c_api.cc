#include "state/c_api.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "state/ownership_model.h"
#include "state/scenario.h"
#include "state/scenario_runner.h"

#define FP8AUDIT_EXPORT extern "C" __attribute__((visibility("default")))

using fp8audit::CheckpointKind;
using fp8audit::state::ModuleCtx;
using fp8audit::state::ModuleInfo;
using fp8audit::state::OwnershipModel;

// The model plus the mirror of torch's grad mode: entries the driver pushed to follow it are
// popped when the scope they were pushed in ends (the runtime's StateManager does the same).
struct fp8audit_model {
  explicit fp8audit_model(fp8audit::state::Semantics s) : model(s, 0) {
    model.set_record_events(false);
  }
  OwnershipModel model;
  std::vector<size_t> marks;
  size_t sync = 0;
  std::vector<std::string> violations;
  size_t violations_taken = 0;

  void Sync(bool grad) {
    const size_t mark = marks.empty() ? 0 : marks.back();
    while (model.grad_enabled() != grad && sync > mark) {
      model.PopGrad();
      --sync;
    }
    if (model.grad_enabled() != grad) {
      model.PushGrad(grad);
      ++sync;
    }
  }
  void PopSync() {
    const size_t mark = marks.empty() ? 0 : marks.back();
    while (sync > mark) {
      model.PopGrad();
      --sync;
    }
    if (!marks.empty()) marks.pop_back();
  }
  ModuleInfo Info(uint32_t module) {
    model.AddModules(module + 1);
    ModuleInfo info;
    info.id = module;
    return info;
  }
};

namespace {

void CopyOut(const std::string& text, char* buf, size_t cap) {
  if (buf == nullptr || cap == 0) return;
  const size_t n = std::min(text.size(), cap - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

}  // namespace

FP8AUDIT_EXPORT int fp8audit_model_abi(void) { return FP8AUDIT_MODEL_ABI; }

FP8AUDIT_EXPORT fp8audit_model* fp8audit_model_new(const char* semantics) {
  const auto s = fp8audit::state::ParseSemantics(semantics ? semantics : "");
  if (!s) return nullptr;
  return new fp8audit_model(*s);
}

FP8AUDIT_EXPORT void fp8audit_model_free(fp8audit_model* m) { delete m; }

FP8AUDIT_EXPORT void fp8audit_model_autocast_enter(fp8audit_model* m, int enabled, int delayed,
                                                   int grad) {
  m->Sync(grad != 0);
  m->marks.push_back(m->sync);
  m->model.AutocastEnter(enabled != 0, delayed != 0);
}

FP8AUDIT_EXPORT int fp8audit_model_autocast_exit(fp8audit_model* m, int failed, int grad) {
  m->PopSync();
  m->Sync(grad != 0);  // the grad mode the autocast exits into decides the forward update
  const uint64_t before = m->model.forward_updates();
  m->model.AutocastExit(failed != 0);
  return m->model.forward_updates() != before ? 1 : 0;
}

FP8AUDIT_EXPORT int fp8audit_model_module_stash(fp8audit_model* m, uint32_t module, int grad,
                                                uint32_t* popped, uint32_t* pushed, uint32_t cap,
                                                uint32_t* pushed_count) {
  m->Sync(grad != 0);
  const fp8audit::state::StashTransition t = m->model.ModuleStash(m->Info(module));
  if (popped) *popped = t.popped;
  if (pushed_count) *pushed_count = static_cast<uint32_t>(t.pushed.size());
  for (uint32_t i = 0; pushed && i < cap && i < t.pushed.size(); ++i) pushed[i] = t.pushed[i];
  return t.missing ? 1 : 0;
}

FP8AUDIT_EXPORT int fp8audit_model_take_ownership(fp8audit_model* m, uint32_t module, int grad) {
  m->Sync(grad != 0);
  return m->model.ModuleTakeOwnership(m->Info(module)).owns_update ? 1 : 0;
}

FP8AUDIT_EXPORT int fp8audit_model_owner_backward(fp8audit_model* m, uint32_t module) {
  ModuleCtx ctx;
  ctx.module = m->Info(module).id;
  ctx.has_ctx = true;
  ctx.fp8 = true;
  ctx.delayed = true;
  ctx.owns_update = true;
  const uint64_t before = m->model.backward_updates();
  m->model.ModuleBackward(ctx);
  return m->model.backward_updates() != before ? 1 : 0;
}

FP8AUDIT_EXPORT uint32_t fp8audit_model_checkpoint_enter(fp8audit_model* m, int reentrant,
                                                         int caller_grad, int inputs_require_grad,
                                                         int* direct) {
  m->Sync(caller_grad != 0);
  m->marks.push_back(m->sync);
  const fp8audit::state::CheckpointEntry e = m->model.CheckpointEnter(
      reentrant ? CheckpointKind::kReentrant : CheckpointKind::kNonReentrant,
      inputs_require_grad != 0);
  if (direct) *direct = e.direct ? 1 : 0;
  return e.frame;
}

FP8AUDIT_EXPORT void fp8audit_model_checkpoint_exit(fp8audit_model* m, uint32_t frame, int failed) {
  m->PopSync();
  m->model.CheckpointExit(frame, failed != 0);
  if (m->model.open_frames() == 0) m->model.CompactFrames();
}

FP8AUDIT_EXPORT int fp8audit_model_recompute_enter(fp8audit_model* m, uint32_t frame) {
  m->marks.push_back(m->sync);
  if (!m->model.RecomputeEnter(frame, false, /*own_autocast=*/false)) {
    m->marks.pop_back();
    return 0;
  }
  return 1;
}

FP8AUDIT_EXPORT void fp8audit_model_recompute_exit(fp8audit_model* m, uint32_t frame, int failed) {
  m->PopSync();
  m->model.RecomputeExit(frame, failed != 0, /*own_autocast=*/false);
  if (m->model.open_frames() == 0) m->model.CompactFrames();
}

FP8AUDIT_EXPORT void fp8audit_model_abandon_frame(fp8audit_model* m, uint32_t frame) {
  m->model.AbandonFrame(frame);
  if (m->model.open_frames() == 0) m->model.CompactFrames();
}

FP8AUDIT_EXPORT int fp8audit_model_first_module(const fp8audit_model* m) {
  return m->model.first_module_available() ? 1 : 0;
}
FP8AUDIT_EXPORT int fp8audit_model_recompute_phase(const fp8audit_model* m) {
  return m->model.recompute_phase() ? 1 : 0;
}
FP8AUDIT_EXPORT int fp8audit_model_recompute_region(const fp8audit_model* m) {
  return m->model.recompute_region() ? 1 : 0;
}
FP8AUDIT_EXPORT uint32_t fp8audit_model_autocast_depth(const fp8audit_model* m) {
  return m->model.autocast_depth();
}
FP8AUDIT_EXPORT uint32_t fp8audit_model_open_frames(const fp8audit_model* m) {
  return static_cast<uint32_t>(m->model.open_frames());
}
FP8AUDIT_EXPORT uint64_t fp8audit_model_forward_updates(const fp8audit_model* m) {
  return m->model.forward_updates();
}
FP8AUDIT_EXPORT uint64_t fp8audit_model_backward_updates(const fp8audit_model* m) {
  return m->model.backward_updates();
}
FP8AUDIT_EXPORT uint32_t fp8audit_model_frame_stash(const fp8audit_model* m, uint32_t frame) {
  return static_cast<uint32_t>(m->model.frame_stash_size(frame));
}

FP8AUDIT_EXPORT uint32_t fp8audit_model_take_violations(fp8audit_model* m) {
  m->violations.clear();
  auto* all = m->model.mutable_violations();
  for (const auto& v : *all) m->violations.push_back(v.message());
  all->clear();
  return static_cast<uint32_t>(m->violations.size());
}

FP8AUDIT_EXPORT const char* fp8audit_model_violation(const fp8audit_model* m, uint32_t i) {
  return i < m->violations.size() ? m->violations[i].c_str() : "";
}

FP8AUDIT_EXPORT long fp8audit_scenario_json(const char* path, char* buf, size_t cap) {
  std::string error;
  const auto scenario = fp8audit::state::LoadScenarioFile(path ? path : "", &error);
  if (!scenario) {
    CopyOut(error, buf, cap);
    return -1;
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(*scenario, &json, options).ok()) {
    CopyOut(std::string(path) + ": cannot convert the scenario to JSON", buf, cap);
    return -1;
  }
  CopyOut(json, buf, cap);
  return static_cast<long>(json.size());
}

FP8AUDIT_EXPORT long fp8audit_run_scenario(const char* path, const char* semantics,
                                           uint32_t microbatches, uint64_t* counts, size_t cap,
                                           char* err, size_t err_cap) {
  const auto s = fp8audit::state::ParseSemantics(semantics ? semantics : "");
  if (!s) {
    CopyOut(std::string("unknown semantics '") + (semantics ? semantics : "") + "'", err, err_cap);
    return -1;
  }
  std::string error;
  const auto sc = fp8audit::state::LoadAndCompileScenario(path ? path : "", &error);
  if (!sc) {
    CopyOut(error, err, err_cap);
    return -1;
  }
  fp8audit::state::RunOptions options;
  options.semantics = *s;
  options.microbatches = microbatches;
  options.record_events = false;
  const auto outcome = fp8audit::state::RunScenario(*sc, options);
  for (size_t i = 0; i < outcome.microbatches.size() && i < cap; ++i) {
    counts[2 * i] = outcome.microbatches[i].forward_updates;
    counts[2 * i + 1] = outcome.microbatches[i].backward_updates;
  }
  return static_cast<long>(outcome.microbatches.size());
}
