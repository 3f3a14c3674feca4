/* A C ABI over the ownership model (state/), for drivers in other languages: the Python patch of
 * Transformer Engine (python/fp8audit/te) loads libfp8audit_model.so with ctypes and asks the model
 * for every decision. Plain C types only; no exceptions cross it. Not thread-safe: one model per
 * training process, called under the caller's lock.
 *
 * Grad mode: every transition that depends on it takes `grad` (torch.is_grad_enabled() at the
 * call); the model mirrors it, with the checkpoint's own no_grad and the recompute's enable_grad
 * pushed by the model itself (as the runtime does). */
#ifndef FP8AUDIT_STATE_C_API_H_
#define FP8AUDIT_STATE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FP8AUDIT_MODEL_ABI 1

typedef struct fp8audit_model fp8audit_model;

int fp8audit_model_abi(void); /* FP8AUDIT_MODEL_ABI of the library */

/* A model under the named semantics ("fixed", "te-2.20", "te-172bd93" or its aliases "te-2.19"
 * and "te-legacy"); NULL for an unknown name. Events are not recorded (bounded memory). */
fp8audit_model* fp8audit_model_new(const char* semantics);
void fp8audit_model_free(fp8audit_model* m);

/* Autocast. exit returns 1 when the model performs a forward update here. */
void fp8audit_model_autocast_enter(fp8audit_model* m, int enabled, int delayed, int grad);
int fp8audit_model_autocast_exit(fp8audit_model* m, int failed, int grad);

/* A module forward's recompute-metadata transition (fixed semantics): the frame it consumed a stash
 * from (*popped, 0 none) and up to `cap` frames it stashed into (*pushed_count is the full count).
 * Returns 1 when a stash was due but missing or belongs to another module. */
int fp8audit_model_module_stash(fp8audit_model* m, uint32_t module, int grad, uint32_t* popped,
                                uint32_t* pushed, uint32_t cap, uint32_t* pushed_count);
/* A module with a backward node running in FP8 reads the first-module flag: 1 when it owns the
 * backward update. */
int fp8audit_model_take_ownership(fp8audit_model* m, uint32_t module, int grad);
/* The owner's backward: returns 1 (the model counts the backward update). */
int fp8audit_model_owner_backward(fp8audit_model* m, uint32_t module);

/* Checkpoint frames. enter returns the frame id (> 0) and sets *direct when the callable runs
 * without a frame. caller_grad: grad mode where the checkpoint was called. */
uint32_t fp8audit_model_checkpoint_enter(fp8audit_model* m, int reentrant, int caller_grad,
                                         int inputs_require_grad, int* direct);
void fp8audit_model_checkpoint_exit(fp8audit_model* m, uint32_t frame, int failed);
/* The framework opens the recompute's autocast itself (autocast_enter follows). 0: the frame
 * cannot be recomputed (unknown, invalidated, already recomputing); nothing changed. */
int fp8audit_model_recompute_enter(fp8audit_model* m, uint32_t frame);
void fp8audit_model_recompute_exit(fp8audit_model* m, uint32_t frame, int failed);

/* The frame's autograd graph is gone: it will never be recomputed (see AbandonFrame). */
void fp8audit_model_abandon_frame(fp8audit_model* m, uint32_t frame);

/* Observations. */
int fp8audit_model_first_module(const fp8audit_model* m);
int fp8audit_model_recompute_phase(const fp8audit_model* m);
int fp8audit_model_recompute_region(const fp8audit_model* m);
uint32_t fp8audit_model_autocast_depth(const fp8audit_model* m);
uint32_t fp8audit_model_open_frames(const fp8audit_model* m);
uint64_t fp8audit_model_forward_updates(const fp8audit_model* m);
uint64_t fp8audit_model_backward_updates(const fp8audit_model* m);
uint32_t fp8audit_model_frame_stash(const fp8audit_model* m, uint32_t frame);
/* Violations found since the last call: their count; the i-th message (valid until the next
 * call that takes violations or changes the model). */
uint32_t fp8audit_model_take_violations(fp8audit_model* m);
const char* fp8audit_model_violation(const fp8audit_model* m, uint32_t i);

/* Scenarios (for tests that drive another implementation with the same programs). */
/* The scenario file as JSON (protobuf's JSON mapping, field names as in the .proto). Writes at most
 * cap bytes with a terminating NUL; returns the full length, or -1 with one error line in buf. */
long fp8audit_scenario_json(const char* path, char* buf, size_t cap);
/* Runs the scenario under the semantics; writes forward, backward update counts per microbatch
 * (2 per microbatch, at most cap microbatches). Returns the microbatch count, -1 on error (one
 * line in err). microbatches 0: the scenario's own count. */
long fp8audit_run_scenario(const char* path, const char* semantics, uint32_t microbatches,
                           uint64_t* counts, size_t cap, char* err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* FP8AUDIT_STATE_C_API_H_ */
