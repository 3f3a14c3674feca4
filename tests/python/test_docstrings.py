"""Every public name of the fp8audit package has a docstring: each module, and in each public
module (no part of its dotted name starting with "_") its functions, classes and their methods
without a leading underscore, and what it re-exports from a private module (fp8audit.microbatch,
defined in fp8audit/_markers.py). Read from the source (ast), nothing imported."""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "fp8audit"

# Public names allowed to lack a docstring (none now). An entry that has one fails the test too:
# the list stays exact.
ALLOWED_MISSING: Set[str] = set()

Definition = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def public(name: str) -> bool:
    return not name.startswith("_")


def definitions(body: List[ast.stmt]) -> Iterator[Tuple[str, Definition]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node


def undocumented(name: str, node: Definition, where: str) -> Iterator[Tuple[str, str]]:
    """`name` and, for a class, its public methods and nested classes, where they lack one."""
    if ast.get_docstring(node) is None:
        yield name, f"{where}:{node.lineno}"
    if isinstance(node, ast.ClassDef):
        for member, child in definitions(node.body):
            if public(member):
                yield from undocumented(f"{name}.{member}", child, where)


def source_of(module: str) -> Optional[Path]:
    """The file of fp8audit module `module`, if it is one."""
    base = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_module(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = importer.split(".")
    if not is_package:
        parts.pop()
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def missing_docstrings() -> Dict[str, str]:
    """Every public name without a docstring, with where it is defined."""
    missing: Dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        tree = parse(path)
        where = str(path.relative_to(PACKAGE.parent.parent))
        if ast.get_docstring(tree) is None:
            missing[name] = f"{where} (module)"
        if not all(public(part) for part in name.split(".")[1:] if part != "__main__"):
            continue  # a private module: its names count where a public module re-exports them
        for member, node in definitions(tree.body):
            if public(member):
                missing.update(undocumented(f"{name}.{member}", node, where))
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            source = source_of(imported_module(node, name, path.name == "__init__.py"))
            if source is None:
                continue
            defined = dict(definitions(parse(source).body))
            source_where = str(source.relative_to(PACKAGE.parent.parent))
            for alias in node.names:
                exported = alias.asname or alias.name
                if public(exported) and alias.name in defined:
                    missing.update(undocumented(f"{name}.{exported}", defined[alias.name],
                                                source_where))
    return missing


def test_the_walk_finds_the_public_names_and_their_reexports() -> None:
    names = {n for n, _ in undocumented("m.C", ast.parse(
        "class C:\n    def f(self): pass\n    def _g(self): pass\n").body[0], "x.py")}
    assert names == {"m.C", "m.C.f"}
    assert source_of("fp8audit._markers") == PACKAGE / "_markers.py"
    assert source_of("fp8audit.te") == PACKAGE / "te" / "__init__.py"
    relative = ast.parse("from ._patch import patch").body[0]
    assert isinstance(relative, ast.ImportFrom)
    assert imported_module(relative, "fp8audit.te", is_package=True) == "fp8audit.te._patch"
    assert imported_module(relative, "fp8audit.te.x", is_package=False) == "fp8audit.te._patch"


def test_every_public_name_has_a_docstring() -> None:
    missing = missing_docstrings()
    unexpected = {n: w for n, w in missing.items() if n not in ALLOWED_MISSING}
    assert not unexpected, "public names without a docstring:\n" + "\n".join(
        f"  {n}  ({w})" for n, w in sorted(unexpected.items()))
    stale = sorted(ALLOWED_MISSING - set(missing))
    assert not stale, f"these have a docstring now: remove them from ALLOWED_MISSING: {stale}"
