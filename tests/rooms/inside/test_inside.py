"""The code that runs inside the sandbox (sandbox/inside) keeps to its side of the boundary.

It is copied into the image byte for byte and runs under the image's Python with nothing
installed for it, so it may import only the standard library and itself; the host may
import only its wire module (the frame format and the layout both sides agree on); and
no import circle is left anywhere in the product. Read from the sources with `ast`, so
what is checked is every import written, also those inside functions.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ROOT

INSIDE = "airlock.sandbox.inside"
WIRE = f"{INSIDE}.wire"
ROOMS = sorted(p.name for p in (ROOT / "airlock").iterdir() if p.is_symlink())


def _product() -> dict[str, Path]:
    """Every module of the product by its installed name (the rooms install as airlock.<room>)."""
    modules = {
        "airlock" if path.name == "__init__.py" else f"airlock.{path.stem}": path
        for path in (ROOT / "airlock").glob("*.py")
    }
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = ["airlock", *path.relative_to(ROOT).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


PRODUCT = _product()
INSIDE_MODULES = sorted(name for name in PRODUCT if name == INSIDE or name.startswith(f"{INSIDE}."))


def _tree(module: str) -> ast.Module:
    return ast.parse(PRODUCT[module].read_text(encoding="utf-8"), filename=str(PRODUCT[module]))


def _package(module: str) -> str:
    return module if PRODUCT[module].name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, list[str]]]:
    """Each import statement of `module` with the modules it names, made absolute; a name
    imported from a package counts as its submodule when there is one."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = _package(module).split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            named = [f"{base}.{alias.name}" for alias in node.names]
            yield node, [base, *(name for name in named if name in PRODUCT)]


def test_the_inside_modules_are_found() -> None:
    names = {name.rpartition(".")[2] for name in INSIDE_MODULES}
    assert {"wire", "codeproc", "boot", "runner", "prestart", "inventory", "editable_site"} <= names


@pytest.mark.parametrize("module", INSIDE_MODULES)
def test_inside_imports_only_the_standard_library_and_itself(module: str) -> None:
    for node, targets in _imports(module):
        for target in targets:
            if isinstance(node, ast.ImportFrom) and node.level:
                # Relative, so within the package wherever the image puts it.
                assert target == INSIDE or target.startswith(f"{INSIDE}."), (module, target)
            else:
                top = target.partition(".")[0]
                assert top in sys.stdlib_module_names, f"{module}:{node.lineno} imports {target}"


@pytest.mark.parametrize("module", INSIDE_MODULES)
def test_inside_imports_nothing_by_a_name_in_a_string(module: str) -> None:
    """A dynamic import would pass the checks here unseen (boot.py once imported the
    runner as `__import__("sandbox.runner")`)."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            assert called not in {"__import__", "importlib.import_module", "import_module"}, (
                f"{module}:{node.lineno} calls {called}"
            )


def test_the_host_imports_only_the_wire_module_of_inside() -> None:
    crossings = [
        f"{module}:{node.lineno} imports {target}"
        for module in PRODUCT
        if module not in INSIDE_MODULES
        for node, targets in _imports(module)
        for target in targets
        if (target == INSIDE or target.startswith(f"{INSIDE}."))
        and not (target == INSIDE and isinstance(node, ast.ImportFrom) and _only_wire(node))
        and target != WIRE
    ]
    assert crossings == []


def _only_wire(node: ast.ImportFrom) -> bool:
    """`from .inside import wire`: the package is named only to reach wire."""
    return [alias.name for alias in node.names] == ["wire"]


def test_the_host_does_import_the_wire_module() -> None:
    """So the check above reads the host's imports of inside at all."""
    importers = {
        module
        for module in PRODUCT
        if module not in INSIDE_MODULES
        for _, targets in _imports(module)
        if WIRE in targets
    }
    assert {"airlock.sandbox.exchange", "airlock.sandbox.docker.run"} <= importers


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def _graph() -> dict[str, set[str]]:
    return {
        module: {
            target for _, targets in _imports(module) for target in targets if target in PRODUCT
        }
        - {module}
        for module in PRODUCT
    }


def test_no_import_circle_anywhere_in_the_product() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """So the check above can fail: runner importing boot, as it once did, closes one."""
    graph = _graph()
    graph[f"{INSIDE}.runner"].add(f"{INSIDE}.boot")
    assert [f"{INSIDE}.boot", f"{INSIDE}.runner"] in _circles(graph)


def _needed(entrypoint: str) -> set[str]:
    """The files of inside an entrypoint imports, itself included, followed through them."""
    needed = {f"{INSIDE}.{entrypoint}", INSIDE}
    todo = [f"{INSIDE}.{entrypoint}"]
    while todo:
        for _, targets in _imports(todo.pop()):
            for target in targets:
                if target in INSIDE_MODULES and target not in needed:
                    needed.add(target)
                    todo.append(target)
    return {"__init__.py" if m == INSIDE else f"{m.rpartition('.')[2]}.py" for m in needed}


def test_each_image_copies_every_inside_file_its_entrypoint_imports() -> None:
    """The images copy only the files they name: one an entrypoint imports but the list
    lacks would fail in every container, not here."""
    from airlock.sandbox.browser_image import DRIVER_MODULES
    from airlock.sandbox.image import INSIDE_MODULES as COPIED

    sandbox = {*COPIED, "runner.py"}
    assert _needed("boot") | _needed("runner") <= sandbox
    assert _needed("browser") <= set(DRIVER_MODULES)
    assert {"entry.py", "report.py"} <= _needed("runner") & _needed("browser")
