"""The python hook's te-recompute feature: whether a Transformer Engine module recomputed in
backward runs in the FP8 state of its original forward.

A checkpoint that is not TE's own (torch.utils.checkpoint under HF gradient checkpointing, a
framework's) restores torch's autocast in its recompute but not TE's FP8 autocast: the recomputed
modules can then run without FP8 (or with it) where their forward did not, a silent change of
precision that no update count shows. Each call of a TE module records whether FP8 was enabled;
a call made while PyTorch's autograd engine runs a backward pass is a recompute, and sends one
NVTX mark

    fp8audit.te.recompute module=<Class>#<n> fp8=<0|1> forward_fp8=<0|1>[ context=recipe]
        [ checkpoint=<where>]

(n: the module's place among the TE modules of its class, in the order of their first call;
context=recipe: both in FP8, but under recipes of another class or other parameters (TE issue
#1568: a recompute under the backward's autocast); context=fp8_output, fp8_grad or
fp8_output+fp8_grad: both in FP8 under the same recipe, but the module called with another value
of that quantization kwarg of its forward (TE's Linear and LayerNormLinear take both,
DotProductAttention fp8_output; a class whose forward takes neither is not compared), the
recompute's output or its input's gradient then quantized otherwise than in the forward the
backward pairs with; one context per mark, the first difference of FP8 on/off (no context),
recipe, kwargs; checkpoint, on a mismatch only: the checkpoint implementation found on the Python
stack). A mismatch's mark follows a call-site mark (hook/callsite.py): the line of the job's code
that called the module. The agent records it as a MODULE_RECOMPUTE event; the audit calls a
mismatch harmful.

The kwargs are read from the call's own arguments (keyword, else positional by the class's forward
signature, else its default), the signature read once per class; truth, as TE's: `if fp8_output`.
A recompute is compared with its module's last forward, for the FP8 state, the recipe and these
kwargs alike: a module called twice in one forward with other values (a layer shared between two
places) is compared with its second call, so its first call's recompute would be named.
`is_first_microbatch` is not compared here: a checkpoint replays it, and what it does in a
recompute (re-quantizing a weight cache its forward filled) is judged by its effect, the
weight-refresh check (hook/refresh.py).

The same check also names the FP8 recipe each module runs under, once per recipe class:

    fp8audit.te.recipe recipe=<Class>

so the audit knows which recipes ran (only DelayedScaling has global state updates to count)."""

from __future__ import annotations

import dataclasses
import functools
import operator
import sys
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from fp8audit import _nvtx
from fp8audit._markers import HOOK_RECIPE_MARK, HOOK_RECOMPUTE_MARK
from fp8audit.hook import callsite

MARK = HOOK_RECOMPUTE_MARK

CHECKPOINTS = callsite.CHECKPOINTS  # (suffix of a frame's file name, the checkpoint it names)


def checkpoint_on_stack(frame: Optional[Any] = None) -> str:
    """The innermost known checkpoint implementation among the calling frames, else 'unknown'."""
    frame = frame if frame is not None else sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        for suffix, checkpoint in CHECKPOINTS:
            if name.endswith(suffix):
                return checkpoint
        frame = frame.f_back
    return "unknown"


MARK_LIMIT = 119  # characters of a mark's text the agent keeps
CONTEXT_RECIPE = "recipe"  # context=: the recompute's recipe is not its forward's
# context=: same recipe, called with another fp8_output / fp8_grad / both than its forward
CONTEXT_FP8_OUTPUT = "fp8_output"
CONTEXT_FP8_GRAD = "fp8_grad"
CONTEXT_FP8_OUTPUT_AND_GRAD = "fp8_output+fp8_grad"
KWARGS = (CONTEXT_FP8_OUTPUT, CONTEXT_FP8_GRAD)  # compared where a class's forward takes them
# A call's kwargs as bits (1: fp8_output, 2: fp8_grad); the context of the bits that differ.
KWARGS_CONTEXT = ("", CONTEXT_FP8_OUTPUT, CONTEXT_FP8_GRAD, CONTEXT_FP8_OUTPUT_AND_GRAD)
_NO_KWARGS: Dict[str, Any] = {}  # a call's kwargs where the caller passes none (never written)


def mark_text(name: str, fp8: bool, forward_fp8: Optional[bool], checkpoint: str = "",
              context: str = "") -> str:
    """The NVTX mark the agent reads for a TE module recomputed in backward: its name, whether it
    computes in FP8 now and did in its forward ("?": not seen), what else of its quantization
    context differs (CONTEXT_RECIPE), and the checkpoint recomputing it, left out where the mark
    would not fit the agent's MARK_LIMIT (where even then it would not, the name is shortened:
    the states after it are what the audit judges)."""
    states = f" fp8={int(fp8)}"
    states += f" forward_fp8={int(forward_fp8)}" if forward_fp8 is not None else " forward_fp8=?"
    states += f" context={context}" if context else ""
    return fitted_mark(MARK, name, states, checkpoint)


def fitted_mark(mark: str, name: str, states: str, checkpoint: str) -> str:
    """`mark module=<name><states>[ checkpoint=<checkpoint>]` within the agent's MARK_LIMIT: the
    checkpoint left out where it would not fit, and where even then the text would not, the
    name shortened (the states after it are what the audit judges)."""
    prefix = f"{mark} module="
    text = prefix + name[:max(1, MARK_LIMIT - len(prefix) - len(states))] + states
    where = f" checkpoint={checkpoint}" if checkpoint else ""
    return text + where if len(text) + len(where) <= MARK_LIMIT else text


ATTENTION_ONLY = ("fp8_dpa", "fp8_mha")  # recipe fields only TE's attention reads


def recipe_key(recipe: Any, attention: bool = True) -> str:
    """What identifies a recipe's quantization for a module: TE's class and the value of each of
    its fields (TE's recipes are dataclasses; DelayedScaling's own repr leaves out
    amax_compute_algo and scaling_factor_compute_algo), its repr where it is no dataclass. Without
    `attention` (any module but TE's DotProductAttention) the fields only attention reads are left
    out. A recipe whose fields cannot be read is keyed by its class alone."""
    name = recipe_class(recipe)
    try:
        if not dataclasses.is_dataclass(recipe):
            return f"{name}:{recipe!r}"
        return name + ":" + ",".join(
            f"{field.name}={getattr(recipe, field.name, None)!r}"
            for field in dataclasses.fields(recipe) if attention or field.name not in ATTENTION_ONLY)
    except Exception:  # a job's recipe with a failing repr: its class still tells classes apart
        return name


def delayed_scaling(recipe: Any) -> bool:
    """Whether `recipe` is DelayedScaling, the one recipe whose scales are global state, by TE's
    own predicate (Recipe.delayed(): true for a subclass too, as Megatron-core's TEDelayedScaling);
    a job's recipe whose delayed() fails is judged by its TE class's name."""
    if recipe is None:
        return False
    try:
        return bool(recipe.delayed())
    except Exception:
        return recipe_class(recipe) == "DelayedScaling"


def recipe_class(recipe: Any) -> str:
    """The name of TE's own class of `recipe`: the first class in its method resolution order that
    Transformer Engine defines (Megatron-core's TEDelayedScaling is DelayedScaling), else its own."""
    for cls in type(recipe).__mro__:
        if getattr(cls, "__module__", "").startswith("transformer_engine."):
            return cls.__name__
    return type(recipe).__name__


def recipe_mark_text(recipe: Any) -> str:
    """The NVTX mark naming TE's class of a recipe a TE module ran under."""
    return f"{HOOK_RECIPE_MARK} recipe={recipe_class(recipe)}"


def recipe_watcher(send: Callable[[str], None]) -> Callable[[Any], None]:
    """Called with the recipe of each TE module call in FP8: sends the recipe's mark when its class
    is new. One identity check per call while the job keeps its recipe object."""
    last: List[Any] = [None]
    sent: Set[str] = set()

    def seen(recipe: Any) -> None:
        if recipe is last[0]:
            return
        last[0] = recipe
        name = recipe_class(recipe)
        if name not in sent:
            sent.add(name)
            send(recipe_mark_text(recipe))

    return seen


def state_reader(manager: Any) -> Callable[[], Tuple[bool, Any]]:
    """(FP8 enabled, the open autocast's recipe or None) of TE's global FP8 state, read in one
    C-level call where the release keeps it in a known place: class attributes of
    FP8GlobalStateManager before TE 2.15, its FP8GlobalState `quantization_state` since (PR #2759);
    else through the manager's is_fp8_enabled() (the recipe then None: ask get_fp8_recipe())."""
    if hasattr(manager, "FP8_ENABLED") and hasattr(manager, "FP8_RECIPE"):
        return functools.partial(operator.attrgetter("FP8_ENABLED", "FP8_RECIPE"), manager)
    state = getattr(manager, "quantization_state", None)
    if hasattr(state, "fp8_enabled") and hasattr(state, "fp8_recipe"):
        return functools.partial(operator.attrgetter("quantization_state.fp8_enabled",
                                                     "quantization_state.fp8_recipe"), manager)
    return lambda: (manager.is_fp8_enabled(), None)


KwargsReader = Callable[[Tuple[Any, ...], Dict[str, Any]], int]


class KwargsBinding(NamedTuple):
    """How a module class's calls carry KWARGS, read once per class (kwargs_binding)."""
    first: int  # a call without keywords and at most this many positional arguments: `defaults`
    defaults: int  # the bits of the forward's defaults
    read: KwargsReader  # the bits of any call


def kwargs_binding(cls: type) -> Optional[KwargsBinding]:
    """For a module class, the reading of a call's (args, kwargs) into the bits of KWARGS_CONTEXT:
    each of KWARGS its forward takes, by keyword, else by its place among the positional arguments
    after self, else its default, true as TE tests it; None where its forward takes none of them
    (or has no signature to read). Made once per class: a call reads a tuple, no signature; the
    common call (none of them passed) needs no Python call at all (`first`, `defaults`)."""
    import inspect

    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]  # type: ignore
    except (AttributeError, TypeError, ValueError):
        return None
    spec = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for bit, name in enumerate(KWARGS):
        for index, param in enumerate(params):
            if param.name == name and param.kind in (*positional,
                                                     inspect.Parameter.KEYWORD_ONLY):
                default = param.default if param.default is not inspect.Parameter.empty else False
                where = index if param.kind in positional else sys.maxsize  # keyword only
                spec.append((1 << bit, name, where, bool(default)))
    if not spec:
        return None
    defaults = sum(bit for bit, _, _, default in spec if default)
    first = min(where for _, _, where, _ in spec)
    table = tuple(spec)

    def read(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> int:
        if not kwargs and len(args) <= first:  # the common call: the defaults, nothing to look up
            return defaults
        bits = 0
        for bit, name, where, default in table:
            value = kwargs[name] if name in kwargs else args[where] if where < len(args) else \
                default
            if value:
                bits |= bit
        return bits

    return KwargsBinding(first, defaults, read)


# A module's record (_entry), by place: a list read at every module call (hook/frozen.py and
# hook/refresh.py read it too), one name per place.
(AT_NAME, AT_FORWARD_FP8, AT_SAME_MARK, AT_OFF_MARK, AT_RECIPE, AT_REFRESH_MARKS, AT_JUDGED,
 AT_BINDING, AT_KWARGS, AT_FIRST, AT_DEFAULTS) = range(11)


def _entry(module: Any, ordinals: Dict[str, int],
           bindings: Optional[Dict[type, Optional[KwargsBinding]]] = None) -> List[Any]:
    """A module's record, made at its first call: [name, FP8 state of its last forward, the mark
    of a recompute in FP8 as its forward, the mark of one without FP8 as its forward, the recipe
    of its last forward (None: not in FP8), its weight-refresh marks by scale (hook/refresh.py),
    the forward FP8 state the frozen-scale check judged last (hook/frozen.py), its class's
    kwargs_binding (None: nothing to compare), the kwargs bits of its last forward in FP8, the
    binding's first and defaults (read at each call without an attribute lookup)].
    `bindings`: the kwargs bindings made so far, by class. Kept by the check, never on the module:
    a module pickles, saves and deep-copies as without the hook, and a copy is a module of its
    own."""
    cls = type(module).__name__
    if ".ops." in type(module).__module__:  # te.ops.Linear apart from te.Linear
        cls = "ops." + cls
    ordinals[cls] = ordinals.get(cls, 0) + 1
    name = f"{cls}#{ordinals[cls]}"
    bindings = bindings if bindings is not None else {}
    if type(module) not in bindings:
        bindings[type(module)] = kwargs_binding(type(module))
    binding = bindings[type(module)]
    entry: List[Any] = [name, None, mark_text(name, True, True), mark_text(name, False, False),
                        None, {}, None, binding, 0, binding.first if binding else 0,
                        binding.defaults if binding else 0]
    return entry


def watcher(manager: Any, attention: Tuple[type, ...], task_id: Callable[[], int],
            send: Callable[[str], None],
            recipe_seen: Callable[[Any], None] = lambda recipe: None,
            read: Optional[Callable[[], Tuple[bool, Any]]] = None,
            current: Optional[List[Any]] = None,
            frozen: Optional[Callable[[Any, List[Any], Any, Any, Any], None]] = None
            ) -> Callable[..., None]:
    """The check run before each TE module call (`module`): remembers whether its forward computed
    in FP8, and compares a recompute against it. FP8 state from `manager` (FP8GlobalStateManager,
    through `read`, default state_reader(manager)); a call computes in FP8 when FP8 is enabled and,
    for TE's DotProductAttention (`attention`), the recipe asks for FP8 attention (fp8_dpa, or
    fp8_mha which forces it), as TE's own decides: inside an FP8 autocast without it attention
    runs in high precision, so recomputing it outside FP8 changes nothing (Megatron's selective
    core_attn recompute). `task_id`: PyTorch's current autograd task, -1 outside a backward pass
    (a call inside one is a recompute). The recipe of each call in FP8 goes to `recipe_seen` when
    it is not the previous call's. `current[0]` is set at each recompute, in one store, to
    (autograd task, the module's record, its recipe in FP8 or None), for the weight-refresh check.
    `frozen` (hook/frozen.py) is called at a forward in FP8 whose FP8 state object is not the one
    it judged last, with the recipe of the module's previous forward and its own. The returned
    check takes the call's own (args, kwargs) too: a forward in FP8 keeps its fp8_output and
    fp8_grad where the module's class takes them, a recompute in FP8 under the same recipe is
    compared with them. Runs at every module call: its common path reads the state once and, on a
    recompute, sends a mark made at the module's first call."""
    ordinals: Dict[str, int] = {}
    bindings: Dict[type, Optional[KwargsBinding]] = {}
    records: Dict[int, List[Any]] = {}  # a module's record (_entry), by id(module)
    current = current if current is not None else [(-1, None, None)]
    last: List[Any] = [None]
    read = read if read is not None else state_reader(manager)

    def same_recipe(a: Any, b: Any, module: Any) -> bool:
        """Equal keys, made afresh (no table to fill or go stale); only for a recompute under
        another recipe object than its forward's (the caller checks identity first)."""
        full = bool(attention) and isinstance(module, attention)
        return recipe_key(a, full) == recipe_key(b, full)

    def before_call(module: Any, args: Tuple[Any, ...] = (),
                    kwargs: Dict[str, Any] = _NO_KWARGS) -> None:
        entry = records.get(id(module))
        if entry is None:
            entry = records[id(module)] = _entry(module, ordinals, bindings)
            try:  # the record goes with the module (before its id can be another object's)
                weakref.finalize(module, records.pop, id(module), None)
            except TypeError:  # a module without weak references: its record stays
                pass
        enabled, recipe = read()
        fp8 = False
        if enabled:
            if recipe is None:  # TE's own answer for an autocast without one: its default
                recipe = manager.get_fp8_recipe()
            if not (attention and isinstance(module, attention)) or \
                    getattr(recipe, "fp8_dpa", False) or getattr(recipe, "fp8_mha", False):
                fp8 = True
                if recipe is not last[0]:
                    last[0] = recipe
                    recipe_seen(recipe)
        task = task_id()
        if task == -1:
            previous = entry[AT_RECIPE]
            entry[AT_FORWARD_FP8] = fp8
            entry[AT_RECIPE] = recipe if fp8 else None
            if fp8 and entry[AT_BINDING] is not None:  # the common call: no Python call
                plain = not kwargs and len(args) <= entry[AT_FIRST]  # the defaults, no lookup
                entry[AT_KWARGS] = entry[AT_DEFAULTS] if plain else entry[AT_BINDING].read(args,
                                                                                       kwargs)
            if fp8 and frozen is not None:  # one identity check while the module keeps its state
                state = (module.__dict__.get("fp8_meta") or {}).get("scaling_fwd")
                if state is not entry[AT_JUDGED]:
                    frozen(module, entry, state, previous, recipe)
            return
        current[0] = (task, entry, recipe if fp8 else None)
        forward_fp8 = entry[AT_FORWARD_FP8]
        context = ""
        if forward_fp8 is fp8:
            if not fp8:
                send(entry[AT_OFF_MARK])
                return
            if recipe is not entry[AT_RECIPE] and not same_recipe(recipe, entry[AT_RECIPE],
                                                                  module):  # the same: no call
                context = CONTEXT_RECIPE
            else:
                context = "" if entry[AT_BINDING] is None else KWARGS_CONTEXT[entry[AT_KWARGS] ^ (
                    entry[AT_DEFAULTS] if not kwargs and len(args) <= entry[AT_FIRST] else
                    entry[AT_BINDING].read(args, kwargs))]
                if not context:
                    send(entry[AT_SAME_MARK])
                    return
        mismatch = forward_fp8 is not None
        if mismatch:  # where the job's code called the module: one stack walk, on a mismatch only
            send(callsite.mark_text(callsite.user_site()))
        send(mark_text(entry[AT_NAME], fp8, forward_fp8, checkpoint_on_stack() if mismatch else "",
                       context))

    return before_call


def install(manager: Any, classes: Tuple[type, ...], attention: Tuple[type, ...] = (),
            distributed: Any = None) -> None:
    """Wraps the call of each class in `classes` (once) with the check, reading FP8's state from
    `manager` (FP8GlobalStateManager); `attention`: TE's DotProductAttention class(es). Also wraps
    TE's quantize_weight for the weight-refresh check (hook/refresh.py), asking `distributed`
    (TE's distributed module, looked up at each refresh) whether TE's recompute phase is on."""
    import torch

    from fp8audit import hook as switch
    from fp8audit.hook import frozen, refresh

    graph_task = getattr(torch._C, "_current_graph_task_id", None)
    if graph_task is None:
        raise RuntimeError("this PyTorch cannot tell a recompute (no _current_graph_task_id)")
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
    send = _nvtx.sender()
    current: List[Any] = [(-1, None, None)]
    read = state_reader(manager)
    before_call = watcher(manager, attention, graph_task, send, recipe_watcher(send), read,
                          current=current, frozen=frozen.judge(manager, send))
    if callable(getattr(distributed, "in_fp8_activation_recompute_phase", None)):
        def in_phase() -> bool:
            return bool(distributed.in_fp8_activation_recompute_phase())

        def recipe_now() -> Any:
            enabled, recipe = read()
            return (recipe or manager.get_fp8_recipe()) if enabled else None

        refreshed = refresh.reporter(current, send, delayed_scaling, in_phase, checkpoint_on_stack,
                                     graph_task, recipe_now)
        if not refresh.install(refreshed, graph_task,
                               lambda: switch._recording and not compiling()):
            print("fp8audit: python hook 'te-recompute': this Transformer Engine's modules look up "
                  "no quantize_weight (nor get_weight_workspace); weight refreshes in recompute "
                  "are not checked", file=sys.stderr, flush=True)
            switch.unchecked("refresh", "no-quantize-weight")
    else:  # a feature that cannot run says so
        print("fp8audit: python hook 'te-recompute': this Transformer Engine has no "
              "in_fp8_activation_recompute_phase; weight refreshes in recompute are not checked",
              file=sys.stderr, flush=True)
        switch.unchecked("refresh", "no-recompute-phase")
    failed: list = []  # the check's first failure: it ends the check, said once

    def wrap(inner: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            # The flag itself: no call per module call.
            if switch._recording and not failed and not compiling():
                try:
                    before_call(self, args, kwargs)
                except Exception as e:  # the check must never break the job
                    if not failed:
                        failed.append(e)
                        print(f"fp8audit: python hook 'te-recompute' failed ({type(e).__name__}: "
                              f"{e}); recomputes are not checked", file=sys.stderr, flush=True)
                        switch.unchecked("recompute", type(e).__name__)
            return inner(self, *args, **kwargs)

        call.__fp8audit_recompute__ = True  # type: ignore[attr-defined]
        call.__wrapped__ = inner  # type: ignore[attr-defined]  # TE's own, for benchmarks
        return call

    for cls in classes:
        if not getattr(cls.__dict__.get("__call__"), "__fp8audit_recompute__", False):
            setattr(cls, "__call__", wrap(cls.__call__))
