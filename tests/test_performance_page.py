"""docs/performance.md is a page of current figures anyone can reproduce: every `python benchmarks/X.py ...` it
names runs a script that exists with flags that script accepts (its required ones given), `make bench` runs
scripts that exist with flags they accept, and every figure says on which machine and when it was measured.

Read as text: the flags a script accepts are its argparse calls, read from its syntax tree, so no script (and
no torch) is imported or run, and a flag renamed in a script fails here before a reader's copy of the command
fails on the command line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "performance.md"
MAX_LINES = 300


def _page_commands() -> list[tuple[str, list[str]]]:
    """(script, arguments) of every `python benchmarks/X.py ...` on the page, up to the end of its code span."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(r"python3? (benchmarks/[\w/]+\.py)([^`\n|]*)", text)
    return [(script, args.split()) for script, args in found]


def _bench_commands() -> list[tuple[str, list[str]]]:
    """(script, arguments) of every benchmark script the Makefile's `bench` recipe runs."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    recipe = re.search(r"^bench:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "the Makefile has no bench target"
    found = re.findall(r"\$\(PYTHON\) (benchmarks/[\w/]+\.py)([^;\n]*)", recipe.group(1))
    return [(script, args.split()) for script, args in found]


def _call_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _receiver(call: ast.Call) -> str | None:
    func = call.func
    return func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None


def _argparse_of(script: Path) -> tuple[dict[str | None, set[str]], dict[str | None, set[str]]]:
    """Per subcommand (None: the main parser) the option strings the script's argparse accepts, and the
    required ones."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    subcommand_of: dict[str, str] = {}  # the variable holding a subparser -> its command's name
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _call_name(node.value) == "add_parser":
            name = node.value.args[0]
            assert isinstance(name, ast.Constant), f"{script.name}: a subcommand whose name is not a literal"
            subcommand_of.update({t.id: name.value for t in node.targets if isinstance(t, ast.Name)})
    accepted: dict[str | None, set[str]] = {None: {"-h", "--help"}}
    accepted.update({name: {"-h", "--help"} for name in subcommand_of.values()})
    required: dict[str | None, set[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _call_name(node) == "add_argument"):
            continue
        group = subcommand_of.get(_receiver(node) or "")
        options = {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
        accepted.setdefault(group, set()).update(options)
        if any(k.arg == "required" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords):
            required.setdefault(group, set()).update(options)
    return accepted, required


def _problems(where: str, commands: list[tuple[str, list[str]]]) -> list[str]:
    problems = []
    for script, args in commands:
        path = REPO / script
        if not path.is_file():
            problems.append(f"{where}: {script} does not exist")
            continue
        accepted, required = _argparse_of(path)
        options = args[: args.index("--")] if "--" in args else args  # after "--" the arguments are pytest's
        group = None
        if len(accepted) > 1:  # a script of subcommands: the first word names one
            words = [a for a in options if not a.startswith("-")]
            group = words[0] if words else None
            if group not in accepted:
                problems.append(f"{where}: {' '.join([script, *args])}: no subcommand of {sorted(map(str, accepted))}")
                continue
        given = {a.split("=")[0] for a in options if a.startswith("--")}
        allowed = accepted[None] | accepted.get(group, set())
        for flag in sorted(given - allowed):
            problems.append(f"{where}: {script} does not accept {flag} (it accepts {sorted(allowed)})")
        for flag in sorted((required.get(None, set()) | required.get(group, set())) - given):
            problems.append(f"{where}: {' '.join([script, *args])} lacks the required {flag}")
    return problems


def test_every_command_on_the_page_runs_a_script_with_flags_it_accepts() -> None:
    commands = _page_commands()
    assert len(commands) >= 10, f"the page names only {len(commands)} benchmark commands: the pattern missed them?"
    problems = _problems("docs/performance.md", commands)
    assert not problems, "\n".join(problems)


def test_make_bench_runs_scripts_that_exist_with_flags_they_accept() -> None:
    commands = _bench_commands()
    assert commands, "make bench runs no benchmarks/ script"
    problems = _problems("Makefile bench", commands)
    assert not problems, "\n".join(problems)


def test_the_page_is_short_and_every_figure_names_its_machine_and_date() -> None:
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, f"docs/performance.md has {len(lines)} lines: the history goes to the notebook"
    section = "\n".join(lines).partition("\n## Machines\n")[2].partition("\n## ")[0]
    machines = set(re.findall(r"^- `([\w-]+)`: ", section, re.MULTILINE))
    assert machines, "docs/performance.md has no '## Machines' section listing - `name`: what it is"
    rows = [
        (number, line)
        for number, line in enumerate(lines, 1)
        if line.startswith("|")
        and not re.match(r"\|[-| ]+\|$", line)  # a table's separator
        and not (number < len(lines) and re.match(r"\|[-| ]+\|$", lines[number]))  # a header: above a separator
    ]
    assert len(rows) >= 20, f"only {len(rows)} figure rows found"
    undated = [
        f"line {number}: {line[:80]}"
        for number, line in rows
        if not re.search(r"\b20\d\d-\d\d-\d\d\b", line) or not any(f"`{m}`" in line for m in machines)
    ]
    assert not undated, f"figures without a machine ({sorted(machines)}) and a date:\n" + "\n".join(undated)
