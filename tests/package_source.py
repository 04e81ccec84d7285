"""What the package's source says, read once per test process: each module's functions (name,
first and last line) and import statements, from one ``ast`` parse of it.

test_code_size, test_import_graph and test_plots each read the whole package (or its estimator),
and a parse of every module is ~0.9 s of CPU. They share it through :func:`package_sources`
(cached), and their tests that read it wear ``xdist_group(GROUP)`` so that under xdist one
worker parses the package once (tests/conftest.py keeps a group a test names itself). Only these
small facts are kept, not the syntax trees: about a million objects that every later full
garbage collection on that worker would walk.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpumem_tui"

#: the xdist group of the tests that read :func:`package_sources`
GROUP = "package-source"


@dataclass(frozen=True)
class Function:
    """A ``def`` or ``async def`` anywhere in a module (methods and nested functions too)."""

    name: str
    lineno: int  # the ``def`` line (decorators above it are not counted)
    end_lineno: int  # the last line of its last statement

    @property
    def lines(self) -> int:
        return self.end_lineno - self.lineno + 1


@dataclass(frozen=True)
class Import:
    """An ``import a.b`` (``module`` None, ``names`` the dotted names) or a ``from module import
    names`` (``level`` the leading dots; ``module`` None for ``from . import x``), anywhere in a
    module: at the top, inside a function, under ``if TYPE_CHECKING``."""

    module: str | None
    names: tuple[str, ...]
    level: int = 0
    is_from: bool = False


@dataclass(frozen=True)
class ModuleSource:
    """One module of the package: its path, its lines, its functions and imports."""

    path: Path
    line_count: int
    functions: tuple[Function, ...]
    imports: tuple[Import, ...]


def _read(path: Path) -> ModuleSource:
    text = path.read_text(encoding="utf-8")
    functions: list[Function] = []
    imports: list[Import] = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(Function(node.name, node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.Import):
            imports.append(Import(None, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            imports.append(Import(node.module, tuple(alias.name for alias in node.names), node.level, is_from=True))
    return ModuleSource(path, len(text.splitlines()), tuple(functions), tuple(imports))


@functools.lru_cache(maxsize=None)
def package_sources() -> tuple[ModuleSource, ...]:
    """Every ``*.py`` under the package, sorted by path, each parsed once per process.

    Raises:
        SyntaxError: a module does not parse.
    """
    return tuple(_read(path) for path in sorted(PACKAGE.rglob("*.py")))
