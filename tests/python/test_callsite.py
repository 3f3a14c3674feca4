"""Where in the job's own code the python hook locates an event (hook/callsite.py): the innermost
frame that is not a library's, shortened to fit the agent's mark."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from fp8audit.hook import callsite  # noqa: E402


class Code:
    def __init__(self, filename, name):
        self.co_filename, self.co_name, self.co_qualname = filename, name, name


class Frame:
    def __init__(self, module, filename, line, name, back=None, local=None):
        self.f_globals = {"__name__": module}
        self.f_code, self.f_lineno, self.f_back = Code(filename, name), line, back
        self.f_locals = local or {}


def block_forward(x):  # the job's checkpointed function (this test file is the job)
    return x


class Ctx:
    run_function = staticmethod(block_forward)


class LibraryModule:  # a module of a library, recomputed directly (checkpoint(te.Linear(), x))
    def forward(self, x):
        return x


LibraryModule.forward.__module__ = "transformer_engine.pytorch.module.linear"


def test_the_innermost_frame_of_the_jobs_own_code_is_the_site():
    job = Frame("__main__", "/home/u/project/train.py", 40, "main")
    model = Frame("models.llama", "/home/u/project/models/llama.py", 57, "Block.forward", job)
    stack = Frame("torch.nn.modules.module", "/v/torch/nn/modules/module.py", 1, "_call_impl",
                  Frame("contextlib", "/usr/lib/python3.11/contextlib.py", 2, "__exit__", model))
    inner = Frame("transformer_engine.pytorch.quantization", "/v/te/q.py", 3, "exit", stack)
    assert callsite.user_site(Frame("fp8audit.hook", "/v/fp8audit/hook.py", 4, "f", inner)) == \
        "models/llama.py:57 in Block.forward"


def test_a_jobs_wrapper_of_the_update_itself_is_skipped_for_the_code_that_led_to_it():
    # A job that wraps TE's update function (to count calls, say) is called by TE: the wrapper is
    # the innermost frame of the job's own, but the site is the job's code TE was called from.
    model = Frame("models.llama", "/home/u/project/models/llama.py", 57, "Block.forward")
    te_exit = Frame("transformer_engine.pytorch.quantization", "/v/te/q.py", 3, "exit", model)
    wrapper = Frame("counters", "/home/u/project/counters.py", 9, "counting", te_exit)
    # `frame`: the hooked function's caller.
    assert callsite.user_site(wrapper, wrappers=True) == "models/llama.py:57 in Block.forward"
    assert callsite.user_site(wrapper) == "project/counters.py:9 in counting"
    assert callsite.user_site(te_exit, wrappers=True) == "models/llama.py:57 in Block.forward"
    # Called from the job's code directly: that code is the site, also where runpy ran the job.
    assert callsite.user_site(model, wrappers=True) == "models/llama.py:57 in Block.forward"
    runpy = Frame("runpy", "/usr/lib/python3.12/runpy.py", 88, "_run_code")
    script = Frame("__main__", "/home/u/project/train.py", 12, "<module>", runpy)
    assert callsite.user_site(script, wrappers=True) == "project/train.py:12 in <module>"


def test_a_stack_of_libraries_only_has_no_site():
    engine = Frame("torch.autograd.function", "/v/torch/autograd/function.py", 1, "apply")
    assert callsite.user_site(Frame("transformer_engine.pytorch.module.linear", "/v/l.py", 2,
                                    "backward", engine)) == ""


def test_a_project_named_like_a_library_prefix_is_still_the_jobs():
    assert not callsite.is_library("torchtitan.train")
    assert not callsite.is_library("megatron.core.transformer.mlp")
    assert callsite.is_library("torch.utils.checkpoint")
    assert callsite.is_library("functools")


def test_a_long_site_keeps_its_end_within_the_marks_room():
    name = "forward_" + "x" * 200
    site = callsite.user_site(Frame("m", "/a/b.py", 12345, name))
    assert len(site) == callsite.LIMIT and site.startswith("...") and site.endswith("x")
    assert len(callsite.mark_text(site).encode()) <= 119


def test_an_update_inside_a_checkpoints_recompute_names_the_checkpointed_function():
    # TE's checkpoint: the update at the exit of the autocast it opens around the recompute, on
    # the autograd engine's thread (no frame of the job's own).
    backward = Frame("transformer_engine.pytorch.distributed",
                     "/v/transformer_engine/pytorch/distributed.py", 97, "backward",
                     local={"ctx": Ctx()})
    exit_ = Frame("transformer_engine.pytorch.quantization", "/v/q.py", 3, "autocast", backward)
    first = block_forward.__code__.co_firstlineno
    assert callsite.user_site(exit_) == \
        f"python/test_callsite.py:{first} in block_forward (checkpointed)"


def test_a_checkpoint_recomputing_a_library_module_directly_falls_through_to_the_job():
    job = Frame("__main__", "/home/u/train.py", 80, "<module>")
    recompute = Frame("torch.utils.checkpoint", "/v/torch/utils/checkpoint.py", 1, "recompute_fn",
                      job, local={"fn": LibraryModule()})
    assert callsite.user_site(recompute) == "u/train.py:80 in <module>"


class JobBlock:  # the job's own module, recomputed directly (checkpoint(block, x)); like
    misses = 0  # torch.nn.Module, an attribute it lacks goes through __getattr__, which raises

    def __getattr__(self, name):
        JobBlock.misses += 1
        raise AttributeError(name)

    def forward(self, x):
        return x


def test_a_jobs_module_recomputed_directly_is_named_by_its_forward_without_attribute_misses():
    # The recompute's function asked of its type: a module's __getattr__ (a Python call and an
    # exception each) is never reached on the way to its forward.
    recompute = Frame("torch.utils.checkpoint", "/v/torch/utils/checkpoint.py", 1, "recompute_fn",
                      local={"fn": JobBlock()})
    JobBlock.misses = 0
    first = JobBlock.forward.__code__.co_firstlineno
    assert callsite.user_site(recompute) == \
        f"python/test_callsite.py:{first} in JobBlock.forward (checkpointed)"
    assert JobBlock.misses == 0


class ConfigBlock:  # the job's callable object, attributes looked up in a dict (KeyError on a miss)
    def __init__(self):
        self.__dict__["cfg"] = {}

    def __getattr__(self, name):
        return self.__dict__["cfg"][name]

    def __call__(self, x):
        return x


def test_a_jobs_callable_object_is_named_by_its_call_and_its_lookups_never_raise():
    # checkpoint(block, x) with a block that is no module: its own __getattr__ raises KeyError,
    # which the site's lookup must neither reach nor let into the job's backward.
    recompute = Frame("torch.utils.checkpoint", "/v/torch/utils/checkpoint.py", 1, "recompute_fn",
                      local={"fn": ConfigBlock()})
    first = ConfigBlock.__call__.__code__.co_firstlineno
    assert callsite.user_site(recompute) == \
        f"python/test_callsite.py:{first} in ConfigBlock.__call__ (checkpointed)"


class RaisingCtx:  # a checkpoint's ctx whose attribute read fails in an unforeseen way
    @property
    def run_function(self):
        raise RuntimeError("not now")


def test_a_site_that_cannot_be_read_is_none_not_an_error_in_the_job():
    backward = Frame("transformer_engine.pytorch.distributed",
                     "/v/transformer_engine/pytorch/distributed.py", 97, "backward",
                     local={"ctx": RaisingCtx()})
    exit_ = Frame("transformer_engine.pytorch.quantization", "/v/q.py", 3, "autocast", backward)
    assert callsite.user_site(exit_) == ""
