"""fp8audit's sitecustomize, first on PYTHONPATH under `fp8audit run` (fp8audit.hook): runs the
sitecustomize that would have run without it (the next one on sys.path), then arms the features
named in FP8AUDIT_PYHOOK. It imports nothing else eagerly."""


def _chain() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["fp8audit_chained_sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:  # as site.py does for a failing sitecustomize
        print(f"Error in sitecustomize ({spec.origin}); fp8audit's hook continues:",
              file=sys.stderr)
        traceback.print_exc()


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


_chain()
_arm()
