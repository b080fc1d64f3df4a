"""The package's imports follow the data flow: no cycles, reports never imported by measurement, a gate without pytest.

Read from the source with ``ast`` (every import, also those inside functions, which are still arrows between
modules; only ``if TYPE_CHECKING:`` blocks are left out, since they never run), so a new cycle or a wrong
arrow fails here with the modules named, before anyone has to find it in a traceback (issue 24).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_sme2"

# Only the pytest wiring of reports and the command line draw reports; measurement, evidence, the Profile
# and the gate never import them (the flow is model -> export -> run -> evidence -> Profile -> gate -> report).
REPORT_IMPORTERS = {"pytest_sme2.plugin.report_hooks", "pytest_sme2.cli"}
# The gate: judging profiles against baselines is plain Python (pytest calls it; so can a command).
GATE = (
    "pytest_sme2.gate.gate",
    "pytest_sme2.system.names",
    "pytest_sme2.gate.verdict",
    "pytest_sme2.gate.judge",
    "pytest_sme2.gate.quality",
    "pytest_sme2.gate.findings",
    "pytest_sme2.gate.baselines",
    "pytest_sme2.profile.stats",
    "pytest_sme2.gate.history",
    "pytest_sme2.evidence.identity",
    # Profile holds what one run means, and the device model prices it; neither is pytest's: a timing read of
    # an emulated profile raises the project's EmulatedTimingError, which the plugin maps to a skip.
    "pytest_sme2.profile.profile",
    "pytest_sme2.profile.device_model",
    "pytest_sme2.measure.runner",
)


# The declared order of the stages, upstream first; each stage is a folder of the package, so the tree itself
# shows the flow. A module may import modules of its own stage or of an earlier one, never of a later one: data
# flows model -> export -> run -> evidence -> Profile -> gate -> report, and what calls what follows it. Where the
# import order differs from the data's (the evidence readers and the category table sit before the export and the
# targets that use them), it is declared here, once. "shared" is the two top-level modules every stage may use
# (errors.py, _version.py); "public" is the package's __init__, which imports every stage. A module in a folder
# not named here fails test_every_module_has_a_declared_stage (docs/design.md says what each folder holds).
STAGES: tuple[str, ...] = (
    "shared",
    "system",
    "model",
    "evidence",
    "export",
    "run",
    "profile",
    "measure",
    "gate",
    "report",
    "plugin",
    "cli",
    "public",
)
SHARED = ("errors", "_version")


def _stage_name(module: str) -> str:
    """The stage of a module: its folder, "shared" for the top-level modules, "public" for the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return "public"
    if len(parts) == 2 and parts[1] in SHARED:
        return "shared"
    return parts[1]


def _stage_of() -> dict[str, int]:
    return {name: STAGES.index(_stage_name(name)) for name in _modules() if _stage_name(name) in STAGES}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_nodes(tree: ast.AST, type_only: bool = False) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (``type_only``: those too)."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _imports(name: str, path: Path, modules: dict[str, Path], type_only: bool = False) -> dict[str, set[str]]:
    """{imported module of this package: set of other top-level names} for one module (``type_only``: with
    the imports made for type checking only)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: dict[str, set[str]] = {}
    for node in _runtime_nodes(ast.parse(path.read_text()), type_only):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                module = full if full in modules else target
                if module in modules and module != name:
                    found.setdefault(module, set())
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.name != name:
                    found.setdefault(alias.name, set())
                elif alias.name.split(".")[0] == "pytest":
                    found.setdefault("pytest", set())
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] in ("pytest", "_pytest")
        ):
            found.setdefault("pytest", set())
    return found


def _graph(type_only: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imports(name, path, modules, type_only)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        for other in graph.get(node, ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def test_the_reader_sees_a_cycle_and_type_only_imports_are_left_out() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\nimport y\n")
    names = {alias.name for node in _runtime_nodes(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert names == {"y"}


def test_the_package_has_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"modules that import each other (directly or around a circle): {cycles}"


def test_no_import_cycles_even_with_type_only_imports() -> None:
    """A cycle hidden behind ``if TYPE_CHECKING:`` is still two modules that know each other's internals (the
    device model read a Profile's; the Profile now hands it PricingInputs)."""
    cycles = _cycles(_graph(type_only=True))
    assert not cycles, f"modules that import each other, counting type-only imports: {cycles}"


def test_only_the_report_wiring_and_the_command_line_import_reports() -> None:
    graph = _graph()
    wrong = {
        name: sorted(d for d in deps if d.startswith("pytest_sme2.report"))
        for name, deps in graph.items()
        if not name.startswith("pytest_sme2.report")
        and name not in REPORT_IMPORTERS
        and any(d.startswith("pytest_sme2.report") for d in deps)
    }
    assert not wrong, f"modules upstream of the reports import them: {wrong}"


def test_the_gate_never_imports_pytest() -> None:
    graph = _graph()
    for module in GATE:
        assert module in graph, module
        reached = _reachable(graph, module)
        assert (
            "pytest" not in reached
        ), f"{module} reaches pytest through {sorted(m for m in reached if 'pytest' in graph.get(m, ()))}"


def test_every_module_has_a_declared_stage() -> None:
    stages = _stage_of()
    unplaced = sorted(set(_modules()) - set(stages))
    gone = sorted(set(stages) - set(_modules()))
    assert not unplaced, f"these modules are in no stage folder of STAGES (tests/test_import_graph.py): {unplaced}"
    assert not gone, f"STAGES places modules that do not exist: {gone}"


def _against_the_flow(graph: dict[str, set[str]], stages: dict[str, int]) -> list[str]:
    names = list(STAGES)
    return [
        f"{module} ({names[stages[module]]}) imports {other} ({names[stages[other]]})"
        for module, imported in sorted(graph.items())
        for other in sorted(imported)
        if other in stages and module in stages and stages[other] > stages[module]
    ]


def test_imports_only_point_upstream() -> None:
    """No module imports one of a later stage (shared modules are everyone's)."""
    against = _against_the_flow(_graph(), _stage_of())
    assert not against, "imports against the flow:\n" + "\n".join(against)


def test_the_stage_check_sees_an_arrow_against_the_flow() -> None:
    stages = _stage_of()
    graph = {"pytest_sme2.profile.profile": {"pytest_sme2.profile.stats", "pytest_sme2.report.table"}}
    assert _against_the_flow(graph, stages) == [
        "pytest_sme2.profile.profile (profile) imports pytest_sme2.report.table (report)"
    ]
    assert (
        stages["pytest_sme2.gate.gate"] > stages["pytest_sme2.profile.profile"] > stages["pytest_sme2.evidence.etdump"]
    )
    assert stages["pytest_sme2.report.summary"] > stages["pytest_sme2.gate.gate"]
    assert stages["pytest_sme2"] == len(STAGES) - 1  # the public face is wiring: it imports every stage
