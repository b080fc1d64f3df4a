"""``pytest-sme2 init MODEL``: from a model module to a first gated run, for someone who has not read the docs.

It writes two new files in the tests folder and touches nothing else: a ``conftest.py`` that registers the
model, and ``test_<name>.py``, a perf test that profiles it with SME2 on and off (each profile is judged against
its baseline) and checks the runs' outputs against PyTorch eager. A conftest rather than a line in the user's
pyproject.toml or pytest.ini, because adding to someone's configuration file means rewriting it; a file that is
already there is never overwritten: the command refuses, names it, and says what to add by hand. The one
exception is a conftest init itself wrote and nobody edited (nothing in it but its docstring, imports and
``register_model`` calls): a second and third model are added to it, one line each, so a perf folder holds
several models (issue 65: init refused the second model because of its own conftest).

A model inside the project is registered by file (relative to the conftest), so it works whatever pytest puts
on ``sys.path``; one of an installed package by its module name. Either way it is imported once here, through
the registry pytest uses, so a module that lacks ``get_eager_model()`` or does not import fails now, with the
same message a test would give.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import ModelDefinitionError, UsageError
from pytest_sme2.model.registry import ModelRegistry, ModelSource
from pytest_sme2.system.regular_files import PROJECT_CONFIG, outside, read_text
from pytest_sme2.system.safe_files import write_file

DTYPES = ("fp32", "fp16", "int8")
INIT_MARK = "(written by pytest-sme2 init"  # in the docstring of the conftest init writes, and adds models to
CONFTEST = '''\
"""Registers the models of the perf tests in this folder (written by pytest-sme2 init, which adds more)."""

{imports}import pytest_sme2

pytest_sme2.register_model({name!r}, {target})
'''
PERF_TEST = '''\
"""Perf tests of the model {name!r} (written by pytest-sme2 init).

Each profile is gated against its baseline in baselines/ (record them with --sme2-update-baselines, then commit
baselines/); add assertions on what this model must keep, e.g. on.delegation_coverage >= 0.95 or
on.share("data_movement") <= 0.4 (README "Writing perf tests").
"""

import pytest

from pytest_sme2 import assert_outputs_match

pytestmark = [pytest.mark.sme2, pytest.mark.model({name!r}, dtype={dtype!r})]


def test_{slug}(exported_pte, runner, etdump_profile):
    on = etdump_profile(exported_pte, runner(sme2=True))
    off = etdump_profile(exported_pte, runner(sme2=False))
    assert_outputs_match(on, exported_pte)
    assert_outputs_match(off, exported_pte)
'''


@dataclass(frozen=True)
class Written:
    """What ``init`` wrote and the commands that come next."""

    conftest: Path
    test_file: Path
    next_commands: tuple[str, str]


def init(
    model: str,
    name: str | None = None,
    dtype: str = "fp32",
    tests_dir: Path = Path("perf_tests"),
    root: Path | None = None,
) -> Written:
    """Write the registration and a perf test of ``model`` (a .py file or a module name) under ``tests_dir``."""
    root = (root or Path.cwd()).resolve()
    folder = tests_dir if tests_dir.is_absolute() else root / tests_dir
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    source = _model_file(model, root)
    name = name or _default_name(model, source)
    slug = re.sub(r"[^A-Za-z0-9_]", "_", name)  # ASCII: `--name ²` wrote `def test_²(` (not Python), exit 0
    conftest, test_file = folder / "conftest.py", folder / f"test_{slug}.py"
    _check_folder(folder, root)
    target = _registration(model, source, folder)
    _check_model(name, source, model, root)
    there = [path for path in (conftest, test_file) if os.path.lexists(path)]  # a dangling link is there too
    registered = _init_registrations(conftest) if there == [conftest] else None
    adding = registered is not None
    if registered is not None:
        if name in registered:
            raise UsageError(
                f"{conftest} already registers a model named {name!r}; init wrote nothing. Pass another --name"
            )
    if there and not adding:
        shown = [f"{p} (a link to {os.path.realpath(p)})" if p.is_symlink() else str(p) for p in there]
        raise UsageError(
            f"{' and '.join(shown)} already exist{'s' if len(there) == 1 else ''}; init never "
            f"overwrites a file and wrote nothing. Pass another --tests-dir, or by hand: in {conftest}, "
            f"`import pytest_sme2`{', `from pathlib import Path`' if 'Path(' in target else ''} and "
            f"`pytest_sme2.register_model({name!r}, {target})`; and a test marked @pytest.mark.model({name!r}) "
            f"(README \"Onboard your own model\")"
        )
    imports = "from pathlib import Path\n\n" if "Path(" in target else ""
    texts = {
        conftest: _added(conftest, name, target)
        if adding
        else CONFTEST.format(name=name, imports=imports, target=target),
        test_file: PERF_TEST.format(name=name, dtype=dtype, slug=slug),
    }
    for path, text in texts.items():
        try:
            ast.parse(text, str(path))
        except SyntaxError as exc:  # a name no check above foresaw: refuse rather than write a file pytest rejects
            raise UsageError(f"init would write {path} that is not Python ({exc.msg}); pass --name letters and digits")
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        if path == conftest and adding:
            write_file(conftest, text)  # init's own conftest, replaced atomically and never through a link
        else:
            _create(path, text)
    command = shlex.quote(os.path.relpath(test_file, Path.cwd()))  # printed to be pasted into a shell
    return Written(
        conftest, test_file, (f"pytest {command} -m sme2 --sme2-update-baselines", f"pytest {command} -m sme2")
    )


def _init_registrations(conftest: Path) -> set[str] | None:
    """The model names a conftest init wrote and nobody changed registers: a regular file (not a link) with init's
    mark in its docstring and nothing but imports and ``pytest_sme2.register_model(...)`` calls; None for any
    other file (the user's own, whatever it holds)."""
    if conftest.is_symlink() or not conftest.is_file():
        return None
    try:
        tree = ast.parse(read_text(conftest, PROJECT_CONFIG), str(conftest))
    except (SyntaxError, ValueError, OSError, UsageError):
        return None
    if INIT_MARK not in (ast.get_docstring(tree) or ""):
        return None
    names = set()
    for statement in tree.body[1:]:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue
        name = _registration_call(statement)
        if name is None:
            return None
        names.add(name)
    return names or None


def _registration_call(statement: ast.stmt) -> str | None:
    """The model name of a ``pytest_sme2.register_model('name', ...)`` statement, else None."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return None
    call = statement.value
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "register_model"):
        return None
    if not (isinstance(func.value, ast.Name) and func.value.id == "pytest_sme2"):
        return None
    first = call.args[0] if call.args else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _added(conftest: Path, name: str, target: str) -> str:
    """The conftest with one more registration, and ``from pathlib import Path`` where it needs it now."""
    text = read_text(conftest, PROJECT_CONFIG)
    if "Path(" in target and not re.search(r"^from pathlib import .*\bPath\b", text, re.MULTILINE):
        text = re.sub(
            r"^import pytest_sme2$", "from pathlib import Path\n\nimport pytest_sme2", text, count=1, flags=re.M
        )
    return text.rstrip("\n") + f"\npytest_sme2.register_model({name!r}, {target})\n"


def _check_folder(folder: Path, root: Path) -> None:
    """UsageError when the tests folder inside the project is a link leading out of it (init would write there)."""
    if os.path.abspath(folder).startswith(str(root) + os.sep) and os.path.lexists(folder):
        leads = outside(folder, root)
        if leads is not None:
            raise UsageError(
                f"{folder} is a link to {leads}, out of the project {root}; init writes only inside it and wrote "
                "nothing. Replace the link by a folder, or pass --tests-dir a folder of the project"
            )


def _create(path: Path, text: str) -> None:
    """Write a new file at ``path``: never an existing file, never through a link (O_EXCL|O_NOFOLLOW)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except FileExistsError:
        raise UsageError(f"{path} appeared while init wrote; init never overwrites a file") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)


def _model_file(model: str, root: Path) -> Path | None:
    """The model's file when it lies in the project (given as a path, or a module name found under ``root``);
    None for a module of an installed package, which is registered by name."""
    if ModelSource("", model).is_file:
        path = Path(model) if Path(model).is_absolute() else root / model
        if not path.is_file():
            raise UsageError(
                f"model file {path} does not exist; give the .py file that defines get_eager_model() "
                "and get_example_inputs(), or its module name"
            )
        return path.resolve()
    if not all(part.isidentifier() for part in model.split(".")):
        raise UsageError(f"{model!r} is neither a .py file nor a module name (such as my_package.my_net)")
    spec = _find_spec(model, [str(root), *sys.path])
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        raise UsageError(
            f"module {model} is not found, neither in {root} nor installed; give the path of the .py "
            "file that defines get_eager_model() and get_example_inputs(), or run init from the "
            "folder its package is in"
        )
    origin = Path(spec.origin).resolve()
    return origin if root in origin.parents else None


def _find_spec(module: str, path: list[str]) -> "importlib.machinery.ModuleSpec | None":
    """The module's spec with ``path`` as sys.path (a parent package that fails to import is "not found")."""
    saved = sys.path[:]
    sys.path[:] = path
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path[:] = saved


def _registration(model: str, source: Path | None, folder: Path) -> str:
    """The register_model target as Python source: the file, from the conftest's own folder; or the module name."""
    if source is None:
        return repr(model)
    try:
        parts = Path(os.path.relpath(source, folder)).parts
    except ValueError:  # another drive
        return repr(str(source))
    ups = len(parts) - len(tuple(itertools.dropwhile(lambda part: part == "..", parts)))
    return f"Path(__file__).resolve().parent{'.parent' * ups} / {'/'.join(parts[ups:])!r}"


def _default_name(model: str, source: Path | None) -> str:
    """The name tests use: the file's stem (a package's folder for its ``__init__.py``), else the module's last part."""
    if source is None:
        return model.rsplit(".", 1)[-1]
    return source.parent.name if source.stem == "__init__" else source.stem


def _check_model(name: str, source: Path | None, model: str, root: Path) -> None:
    """Import the model through the registry pytest uses: its missing function or import error, now."""
    registry = ModelRegistry(root=root)
    try:
        registry.register(name, str(source) if source is not None else model)
    except ModelDefinitionError as exc:
        raise UsageError(f"{exc}; pass --name with another name") from None
    registry.get(name)
