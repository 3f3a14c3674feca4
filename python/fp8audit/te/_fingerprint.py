"""Fingerprints of Transformer Engine's source: sha256 of a canonical form of a function's (or
class's) syntax tree, with docstrings dropped. Comments, formatting and the Python version's
AST details (fields that are empty or None) do not change it; any change of code does."""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterable, Optional


def _canon(node: Any) -> str:
    if isinstance(node, ast.AST):
        parts = []
        for name, value in sorted(ast.iter_fields(node)):
            if value is None or value == [] or name in ("type_comment", "kind"):
                continue
            parts.append(f"{name}={_canon(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_canon(v) for v in node) + "]"
    return repr(node)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def of_node(node: ast.AST) -> str:
    return hashlib.sha256(_canon(_strip_docstrings(node)).encode()).hexdigest()


def of_object(obj: Any) -> str:
    """Fingerprint of a live function, method or class (its source as inspect finds it)."""
    target = getattr(obj, "__func__", obj)  # classmethod / staticmethod
    source = textwrap.dedent(inspect.getsource(target))
    tree = ast.parse(source)
    return of_node(tree.body[0])


def find_node(tree: ast.Module, qualname: str) -> Optional[ast.AST]:
    scope: Iterable[ast.AST] = tree.body
    node: Optional[ast.AST] = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        scope = node.body  # type: ignore[attr-defined]
    return node


def of_source_tree(package_dir: Path, targets: Iterable[str]) -> Dict[str, Optional[str]]:
    """Fingerprints of `module:qualname` targets read from the source files under package_dir
    (the directory transformer_engine/pytorch), without importing anything."""
    out: Dict[str, Optional[str]] = {}
    trees: Dict[str, ast.Module] = {}
    for target in targets:
        module, qualname = target.split(":")
        path = package_dir / (module.replace(".", "/") + ".py")
        if module not in trees:
            trees[module] = ast.parse(path.read_text())
        node = find_node(trees[module], qualname)
        out[target] = of_node(node) if node is not None else None
    return out


def layout_of_source_tree(package_dir: Path) -> str:
    """Where the release under package_dir keeps its global FP8 state (_targets.STATE_*): the
    FP8GlobalState dataclass (TE 2.15 on) or class attributes of FP8GlobalStateManager."""
    from . import _targets

    found = of_source_tree(package_dir, ["quantization:FP8GlobalState"])
    return _targets.STATE_DATACLASS if found["quantization:FP8GlobalState"] else \
        _targets.STATE_CLASS_ATTRIBUTES
