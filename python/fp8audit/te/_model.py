"""ctypes binding of libfp8audit_model.so (state/c_api.h): the C++ ownership model that decides."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import List, Optional, Tuple

ABI = 1
_LIB_NAME = "libfp8audit_model.so"


class ModelUnavailable(RuntimeError):
    """libfp8audit_model.so could not be found or loaded."""


def library_candidates() -> List[Path]:
    """Where the model library is looked for, in order."""
    out: List[Path] = []
    env = os.environ.get("FP8AUDIT_MODEL_LIB")
    if env:
        out.append(Path(env))
    here = Path(__file__).resolve().parent
    out.append(here.parent / "lib" / _LIB_NAME)  # a wheel: fp8audit/lib
    out.append(here / _LIB_NAME)
    root = here.parents[2]  # python/fp8audit/te -> the source tree
    for build in sorted(root.glob("build*/lib")):
        out.append(build / _LIB_NAME)
    out.append(root / _LIB_NAME)  # installed: <prefix>/lib/python/fp8audit/te -> <prefix>/lib
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in library_candidates():
        if not path.is_file():
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        lib.fp8audit_model_abi.restype = ctypes.c_int
        if lib.fp8audit_model_abi() != ABI:
            errors.append(f"{path}: ABI {lib.fp8audit_model_abi()}, expected {ABI}")
            continue
        _declare(lib)
        return lib
    where = "; ".join(errors) if errors else "none of " + ", ".join(map(str, library_candidates()))
    raise ModelUnavailable(f"fp8audit.te: no usable {_LIB_NAME} ({where}); set FP8AUDIT_MODEL_LIB")


def _declare(lib: ctypes.CDLL) -> None:
    P = ctypes.c_void_p
    I = ctypes.c_int
    U32 = ctypes.c_uint32
    U64 = ctypes.c_uint64
    sigs = {
        "fp8audit_model_new": (P, [ctypes.c_char_p]),
        "fp8audit_model_free": (None, [P]),
        "fp8audit_model_autocast_enter": (None, [P, I, I, I]),
        "fp8audit_model_autocast_exit": (I, [P, I, I]),
        "fp8audit_model_module_stash": (
            I, [P, U32, I, ctypes.POINTER(U32), ctypes.POINTER(U32), U32, ctypes.POINTER(U32)]),
        "fp8audit_model_take_ownership": (I, [P, U32, I]),
        "fp8audit_model_owner_backward": (I, [P, U32]),
        "fp8audit_model_checkpoint_enter": (U32, [P, I, I, I, ctypes.POINTER(I)]),
        "fp8audit_model_checkpoint_exit": (None, [P, U32, I]),
        "fp8audit_model_recompute_enter": (I, [P, U32]),
        "fp8audit_model_recompute_exit": (None, [P, U32, I]),
        "fp8audit_model_abandon_frame": (None, [P, U32]),
        "fp8audit_model_first_module": (I, [P]),
        "fp8audit_model_recompute_phase": (I, [P]),
        "fp8audit_model_recompute_region": (I, [P]),
        "fp8audit_model_autocast_depth": (U32, [P]),
        "fp8audit_model_open_frames": (U32, [P]),
        "fp8audit_model_forward_updates": (U64, [P]),
        "fp8audit_model_backward_updates": (U64, [P]),
        "fp8audit_model_frame_stash": (U32, [P, U32]),
        "fp8audit_model_take_violations": (U32, [P]),
        "fp8audit_model_violation": (ctypes.c_char_p, [P, U32]),
        "fp8audit_scenario_json": (ctypes.c_long, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        "fp8audit_run_scenario": (ctypes.c_long, [ctypes.c_char_p, ctypes.c_char_p, U32,
                                                  ctypes.POINTER(U64), ctypes.c_size_t,
                                                  ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


class Model:
    """One OwnershipModel (state/ownership_model.h) under the given semantics."""

    def __init__(self, semantics: str = "fixed") -> None:
        self._lib = lib()
        handle = self._lib.fp8audit_model_new(semantics.encode())
        if not handle:
            raise ValueError(f"unknown semantics {semantics!r}")
        self._h: Optional[ctypes.c_void_p] = ctypes.c_void_p(handle)
        self._pushed = (ctypes.c_uint32 * 16)()

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and getattr(self, "_lib", None) is not None:
            self._lib.fp8audit_model_free(h)
            self._h = None

    def autocast_enter(self, enabled: bool, delayed: bool, grad: bool) -> None:
        self._lib.fp8audit_model_autocast_enter(self._h, enabled, delayed, grad)

    def autocast_exit(self, failed: bool, grad: bool) -> bool:
        return bool(self._lib.fp8audit_model_autocast_exit(self._h, failed, grad))

    def module_stash(self, module: int, grad: bool) -> Tuple[bool, int, List[int]]:
        popped = ctypes.c_uint32(0)
        count = ctypes.c_uint32(0)
        missing = self._lib.fp8audit_model_module_stash(
            self._h, module, grad, ctypes.byref(popped), self._pushed, len(self._pushed),
            ctypes.byref(count))
        if count.value > len(self._pushed):
            raise RuntimeError(f"fp8audit.te: {count.value} nested checkpoint frames (at most 16)")
        return bool(missing), popped.value, list(self._pushed[: count.value])

    def take_ownership(self, module: int, grad: bool) -> bool:
        return bool(self._lib.fp8audit_model_take_ownership(self._h, module, grad))

    def owner_backward(self, module: int) -> bool:
        return bool(self._lib.fp8audit_model_owner_backward(self._h, module))

    def checkpoint_enter(self, reentrant: bool, caller_grad: bool,
                         inputs_require_grad: bool = True) -> Tuple[int, bool]:
        direct = ctypes.c_int(0)
        frame = self._lib.fp8audit_model_checkpoint_enter(
            self._h, reentrant, caller_grad, inputs_require_grad, ctypes.byref(direct))
        return frame, bool(direct.value)

    def checkpoint_exit(self, frame: int, failed: bool) -> None:
        self._lib.fp8audit_model_checkpoint_exit(self._h, frame, failed)

    def recompute_enter(self, frame: int) -> bool:
        return bool(self._lib.fp8audit_model_recompute_enter(self._h, frame))

    def recompute_exit(self, frame: int, failed: bool) -> None:
        self._lib.fp8audit_model_recompute_exit(self._h, frame, failed)

    def abandon_frame(self, frame: int) -> None:
        self._lib.fp8audit_model_abandon_frame(self._h, frame)

    @property
    def first_module(self) -> bool:
        return bool(self._lib.fp8audit_model_first_module(self._h))

    @property
    def recompute_phase(self) -> bool:
        return bool(self._lib.fp8audit_model_recompute_phase(self._h))

    @property
    def recompute_region(self) -> bool:
        return bool(self._lib.fp8audit_model_recompute_region(self._h))

    @property
    def autocast_depth(self) -> int:
        return int(self._lib.fp8audit_model_autocast_depth(self._h))

    @property
    def open_frames(self) -> int:
        return int(self._lib.fp8audit_model_open_frames(self._h))

    @property
    def forward_updates(self) -> int:
        return int(self._lib.fp8audit_model_forward_updates(self._h))

    @property
    def backward_updates(self) -> int:
        return int(self._lib.fp8audit_model_backward_updates(self._h))

    def frame_stash(self, frame: int) -> int:
        return int(self._lib.fp8audit_model_frame_stash(self._h, frame))

    def take_violations(self) -> List[str]:
        n = self._lib.fp8audit_model_take_violations(self._h)
        return [self._lib.fp8audit_model_violation(self._h, i).decode() for i in range(n)]


def scenario_json(path: str) -> str:
    """The scenario file (state/scenarios/*.textproto) as protobuf JSON."""
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        n = lib().fp8audit_scenario_json(path.encode(), buf, size)
        if n < 0:
            raise ValueError(buf.value.decode())
        if n < size:
            return buf.value.decode()
        size = n + 1


def run_scenario(path: str, semantics: str, microbatches: int = 0) -> List[Tuple[int, int]]:
    """The model's forward/backward update counts per microbatch for a scenario file."""
    cap = 4096
    counts = (ctypes.c_uint64 * (2 * cap))()
    err = ctypes.create_string_buffer(512)
    n = lib().fp8audit_run_scenario(path.encode(), semantics.encode(), microbatches, counts, cap,
                                    err, len(err))
    if n < 0:
        raise ValueError(err.value.decode())
    return [(int(counts[2 * i]), int(counts[2 * i + 1])) for i in range(min(n, cap))]
