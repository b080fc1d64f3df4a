"""No function over 80 lines, none with over 7 parameters (issue 67: a house a newcomer can read).

Read from the source with ``ast``: every function, methods and nested ones too, is measured by its body's lines
(``end_lineno - lineno + 1``, from ``def`` to its last line, decorators left out) and by its parameters (positional,
positional-only and keyword-only; ``self``/``cls``, ``*args`` and ``**kwargs`` are not counted). The functions over
a limit today are listed in ALLOWLIST at today's sizes. It is a ratchet: a function not listed fails when it passes a
limit, a listed one fails when it grows past its recorded size, and a listed one that now fits both limits fails
until its line here is deleted, so the list only shrinks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_sme2"

MAX_LINES = 80
MAX_PARAMS = 7

# "module:qualified.name" -> (lines, parameters) recorded when listed. Only shrinks: split a function (named helpers,
# a frozen dataclass for parameters that travel together) and delete or lower its line here. Empty since issue 67's
# last entries were split: every function fits, and a new one over a limit fails (never add a line to pass it).
ALLOWLIST: dict[str, tuple[int, int]] = {}

FIX = (
    "split it into named helpers (a docstring each saying why), and group parameters that travel together "
    "into a small frozen dataclass"
)


@dataclass(frozen=True)
class Function:
    """One function of the package as measured here."""

    name: str  # "module:Class.method" or "module:outer.inner"
    where: str  # "pytest_sme2/path.py:LINE"
    lines: int
    params: int


def _params(args: ast.arguments) -> int:
    """Named parameters: positional-only, positional and keyword-only, without a leading self/cls."""
    names = [arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def _functions_in(tree: ast.AST, module: str, path: str, prefix: str = "") -> list[Function]:
    """Every function under ``tree``, methods and nested functions included, named by where it is defined."""
    found = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            lines = (child.end_lineno or child.lineno) - child.lineno + 1
            found.append(Function(f"{module}:{name}", f"{path}:{child.lineno}", lines, _params(child.args)))
            found += _functions_in(child, module, path, name + ".")
        elif isinstance(child, ast.ClassDef):
            found += _functions_in(child, module, path, prefix + child.name + ".")
        else:
            found += _functions_in(child, module, path, prefix)
    return found


def package_functions(package: Path = PACKAGE) -> dict[str, Function]:
    """The package's functions by qualified name; of two defined under one name (if/else), the larger."""
    functions: dict[str, Function] = {}
    for file in sorted(package.rglob("*.py")):
        parts = file.relative_to(package.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        path = file.relative_to(package.parent).as_posix()
        for function in _functions_in(ast.parse(file.read_text()), module, path):
            known = functions.get(function.name)
            if known is None or (function.lines, function.params) > (known.lines, known.params):
                functions[function.name] = function
    return functions


def limit_problems(functions: dict[str, Function], allowlist: dict[str, tuple[int, int]]) -> list[str]:
    """What breaks the limits or the ratchet, one line per function, each naming the fix."""
    problems = []
    for function in sorted(functions.values(), key=lambda f: f.name):
        size = f"{function.name} ({function.where}): {function.lines} lines, {function.params} parameters"
        fits = function.lines <= MAX_LINES and function.params <= MAX_PARAMS
        listed = allowlist.get(function.name)
        if listed is None:
            if not fits:
                problems.append(f"{size}; over {MAX_LINES} lines or {MAX_PARAMS} parameters: {FIX}")
        elif fits:
            problems.append(f"{size}; now within the limits: delete its line from ALLOWLIST in {__name__}")
        elif function.lines > max(listed[0], MAX_LINES) or function.params > max(listed[1], MAX_PARAMS):
            problems.append(f"{size}; grew past its recorded {listed[0]} lines, {listed[1]} parameters: {FIX}")
    stale = sorted(set(allowlist) - set(functions))
    problems += [f"{name}: listed in ALLOWLIST but no longer defined; delete its line" for name in stale]
    return problems


def test_no_function_over_the_house_limits() -> None:
    problems = limit_problems(package_functions(), ALLOWLIST)
    assert not problems, "\n".join(problems)


def _write(folder: Path, source: str) -> dict[str, Function]:
    (folder / "pytest_sme2").mkdir(exist_ok=True)
    (folder / "pytest_sme2" / "mod.py").write_text(source)
    return package_functions(folder / "pytest_sme2")


def test_the_scan_counts_lines_parameters_and_nesting(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(85))
    source = (
        "import functools\n"
        "@functools.cache\n"
        f"def long(a, b, /, c, *args, d, **kwargs):\n{body}\n"
        "class K:\n"
        "    def method(self, a, b, c, d, e, f, g, h):\n"
        "        def inner(): pass\n"
    )
    functions = _write(tmp_path, source)
    assert functions["pytest_sme2.mod:long"] == Function("pytest_sme2.mod:long", "pytest_sme2/mod.py:3", 86, 4)
    assert functions["pytest_sme2.mod:K.method"].params == 8
    assert "pytest_sme2.mod:K.method.inner" in functions


def test_the_ratchet_fails_new_grown_shrunk_and_stale_entries(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(90))
    functions = _write(tmp_path, f"def new():\n{body}\ndef grown():\n{body}\ndef fits():\n    pass\n")
    allowlist = {"pytest_sme2.mod:grown": (85, 1), "pytest_sme2.mod:fits": (120, 2), "pytest_sme2.mod:gone": (99, 1)}
    problems = limit_problems(functions, allowlist)
    assert len(problems) == 4, problems
    assert problems[0].startswith("pytest_sme2.mod:fits (pytest_sme2/mod.py:") and "delete its line" in problems[0]
    assert "grew past its recorded 85 lines" in problems[1] and "split it into named helpers" in problems[1]
    assert "pytest_sme2.mod:new (pytest_sme2/mod.py:1): 91 lines, 0 parameters" in problems[2]
    assert "no longer defined" in problems[3]
    assert limit_problems(functions, {**allowlist, "pytest_sme2.mod:new": (91, 0)})[2:3] != problems[2:3]
