"""fp8audit's sitecustomize, first on PYTHONPATH under `fp8audit run` (fp8audit.hook): runs the
sitecustomize that would have run without it (the next one on sys.path), then arms the features
named in FP8AUDIT_PYHOOK. It imports nothing else eagerly."""


_MARK = b"\"\"\"fp8audit's sitecustomize"  # how every fp8audit hook's file begins
_CHAINED = "fp8audit_chained_sitecustomize"  # sys.modules: the sitecustomize this one ran


def _is_fp8audit_hook(origin: str) -> bool:
    """Whether `origin` is an fp8audit hook's sitecustomize: this file (through any link) or
    another install's, which begins the same way."""
    import os

    try:
        if os.path.realpath(origin) == os.path.realpath(__file__):
            return True
        with open(origin, "rb") as f:
            return f.read(len(_MARK) + 64).lstrip().startswith(_MARK)
    except OSError:
        return False


def _chain() -> None:
    """Runs the first sitecustomize on sys.path that is not an fp8audit hook (another install's,
    or this one reached through a link, would chain back here without end)."""
    import importlib.machinery
    import importlib.util
    import sys
    import traceback

    for entry in sys.path:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None or spec.origin is None:
            continue
        if _is_fp8audit_hook(spec.origin):
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[_CHAINED] = module
        try:
            spec.loader.exec_module(module)
        except Exception:  # as site.py does for a failing sitecustomize
            print(f"Error in sitecustomize ({spec.origin}); fp8audit's hook continues:",
                  file=sys.stderr)
            traceback.print_exc()
        return


def _import_beside() -> None:
    """Imports the fp8audit package this file belongs to (fp8audit/hook/site/ -> fp8audit/) when
    it is not importable otherwise: a wheel's, whose site-packages is not on PYTHONPATH."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    spec = importlib.machinery.PathFinder.find_spec("fp8audit", [root])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["fp8audit"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["fp8audit"]
        raise


def _arm() -> None:
    import sys

    try:
        try:
            import fp8audit.hook  # noqa: F401
        except ImportError:
            _import_beside()
        from fp8audit.hook import install_from_environment
    except ImportError as e:
        print(f"fp8audit: python hook not armed ({e}); is fp8audit's python/ on PYTHONPATH?",
              file=sys.stderr)
        return
    install_from_environment()


def _main() -> None:
    import sys

    if _CHAINED in sys.modules:
        return  # run as the sitecustomize another fp8audit hook chained: that one arms
    _chain()
    _arm()


_main()
