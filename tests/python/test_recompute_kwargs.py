"""Recompute parity of a TE module call's own quantization kwargs (issue 36 item 1), on the CPU
stand-in of TE: a recompute in FP8 under its forward's recipe whose fp8_output or fp8_grad differs
from its forward's (chosen from torch.is_grad_enabled(), which TE's checkpoint turns off in the
forward and on in the recompute, or from a flag the job flips after the forward) is marked with
the kwarg's name as its context; the same kwargs in both, or a class whose forward takes neither
(LayerNormMLP), are no change. The kwargs are bound by the class's signature, read once."""

import textwrap

import test_recompute_hook as base
from fp8audit.hook import recompute

JOB = base.PRELUDE + textwrap.dedent("""
    which = sys.argv[sys.argv.index("--kw") + 1] if "--kw" in sys.argv else "none"
    names = {"output": ("fp8_output",), "grad": ("fp8_grad",),
             "both": ("fp8_output", "fp8_grad"), "none": ()}[which]
    flag = {"flipped": False}

    def value():
        if "--grad-enabled" in sys.argv:  # FP8 output only without autograd (an inference path)
            return torch.is_grad_enabled()
        if "--flip" in sys.argv:  # a flag the job changes after the forward
            return flag["flipped"]
        return "--true" in sys.argv

    def call(layer, x):
        if isinstance(layer, te.LayerNormMLP):  # its forward takes neither kwarg
            return layer(x, is_first_microbatch=value() if "--mlp-first" in sys.argv else None)
        kw = {name: value() for name in names}
        if "--positional" in sys.argv:  # TE's order: inp, is_first_microbatch, fp8_output, fp8_grad
            return layer(x, None, kw.get("fp8_output", False), kw.get("fp8_grad", False))
        return layer(x, **kw)

    torch.manual_seed(0)
    layers = [te.Linear(8, 8), te.LayerNormLinear(8, 8)]
    if "--mlp" in sys.argv:
        layers.append(te.LayerNormMLP(8, 16))
    x = torch.randn(4, 8, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling()):
        for layer in layers:
            x = te.checkpoint(call, layer, x, use_reentrant=True)
    flag["flipped"] = True
    x.float().pow(2).mean().backward()
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")

def marks(tmp_path, *args):
    return base.run_job(tmp_path, *args, job=JOB)


def changed(context, *modules):
    """The marks of `modules` recomputed with `context`: the checkpoint after it where the mark
    fits the agent's limit (LayerNormLinear#1's does not)."""
    out = []
    for m in modules:
        text = f"fp8audit.te.recompute module={m} fp8=1 forward_fp8=1 context={context}"
        where = " checkpoint=te.distributed.checkpoint"
        out.append(text + where if len(text + where) <= recompute.MARK_LIMIT else text)
    return out


SAME = ["fp8audit.te.recompute module=LayerNormLinear#1 fp8=1 forward_fp8=1",
        "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=1"]


def test_an_fp8_output_chosen_from_grad_mode_differs_in_the_recompute_and_is_marked(tmp_path):
    assert marks(tmp_path, "--kw", "output", "--grad-enabled") == changed(
        "fp8_output", "LayerNormLinear#1", "Linear#1")


def test_an_fp8_grad_flipped_after_the_forward_is_marked(tmp_path):
    assert marks(tmp_path, "--kw", "grad", "--flip") == changed(
        "fp8_grad", "LayerNormLinear#1", "Linear#1")


def test_both_kwargs_differing_are_named_together(tmp_path):
    assert marks(tmp_path, "--kw", "both", "--flip") == changed(
        "fp8_output+fp8_grad", "LayerNormLinear#1", "Linear#1")


def test_kwargs_passed_by_position_are_bound_by_the_signature(tmp_path):
    assert marks(tmp_path, "--kw", "output", "--flip", "--positional") == changed(
        "fp8_output", "LayerNormLinear#1", "Linear#1")
    assert marks(tmp_path, "--kw", "grad", "--flip", "--positional") == changed(
        "fp8_grad", "LayerNormLinear#1", "Linear#1")


def test_the_same_kwargs_in_forward_and_recompute_are_no_change(tmp_path):
    for args in (("--kw", "both", "--true"), ("--kw", "both"), ("--kw", "none"),
                 ("--kw", "output", "--true", "--positional")):
        assert marks(tmp_path, *args) == SAME, args


def test_a_class_whose_forward_takes_no_such_kwarg_is_not_compared(tmp_path):
    # LayerNormMLP takes is_first_microbatch only; that one differing is judged by its effect,
    # the weight-refresh check (hook/refresh.py), never as a context here.
    assert marks(tmp_path, "--kw", "output", "--flip", "--mlp", "--mlp-first") == [
        "fp8audit.te.recompute module=LayerNormMLP#1 fp8=1 forward_fp8=1",
        *changed("fp8_output", "LayerNormLinear#1", "Linear#1")]


def test_a_recipe_change_comes_before_a_kwargs_change():
    # One context per mark: the recipe differing, the kwargs are not compared.
    from dataclasses import dataclass

    @dataclass
    class DelayedScaling:
        margin: int = 0

    class Linear:
        def forward(self, inp, is_first_microbatch=None, fp8_output=False, fp8_grad=False):
            pass

    state = {"recipe": DelayedScaling(), "task": -1}
    sent = []
    check = recompute.watcher(object, (), lambda: state["task"], sent.append,
                              read=lambda: (True, state["recipe"]))
    module = Linear()
    check(module, (), {"fp8_output": False})
    state.update(recipe=DelayedScaling(margin=1), task=3)
    check(module, (), {"fp8_output": True})
    assert sent[-1].endswith(" context=recipe checkpoint=unknown"), sent
    state["recipe"] = DelayedScaling()
    check(module, (), {"fp8_output": True})
    assert sent[-1].endswith(" context=fp8_output checkpoint=unknown"), sent


def test_the_reader_binds_each_kwarg_where_the_class_takes_it():
    import transformer_engine.pytorch as te

    linear = recompute.kwargs_binding(te.Linear)
    assert linear is not None and (linear.first, linear.defaults) == (2, 0)  # after inp, first
    assert linear.read((), {}) == 0 and linear.read(("x",), {}) == 0
    assert linear.read(("x",), {"fp8_output": True}) == 1
    assert linear.read(("x", None, False, True), {}) == 2
    assert linear.read(("x", True, 1), {"fp8_grad": True}) == 3  # truth as TE's `if fp8_output`
    attention = recompute.kwargs_binding(te.DotProductAttention)
    assert attention is not None
    assert attention.read(("q", "k", "v"), {"fp8_output": True, "fp8_grad": True}) == 1
    assert recompute.kwargs_binding(te.LayerNormMLP) is None
    assert recompute.kwargs_binding(type("NoForward", (), {})) is None

    class KeywordOnly:
        def forward(self, inp, *extra, fp8_grad=True):
            pass

    binding = recompute.kwargs_binding(KeywordOnly)
    assert binding is not None and binding.defaults == 2
    assert binding.read(("x", False, False, False), {}) == 2  # its default, never a positional
    assert binding.read(("x",), {"fp8_grad": None}) == 0
