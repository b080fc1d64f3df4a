"""The model registry and the onboarding interface.

A model is any module (a file or an importable module) that defines::

    def get_eager_model() -> torch.nn.Module
    def get_example_inputs() -> tuple[torch.Tensor, ...]
    def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]   # optional, int8 static
    def get_dynamic_shapes() -> tuple | dict                          # optional, torch.export's dynamic_shapes

and is registered under a name: every ``*.py`` of a directory listed in the
``sme2_model_dirs`` ini setting (name = file stem), a ``name = target`` line of
``sme2_models``, or ``pytest_sme2.register_model(name, target)`` in a
conftest.py. An unknown name is an error listing what is registered: there is
never a fallback to another model.

A file inside a package (its folder has ``__init__.py``) is imported as part of
that package, under its dotted name, with the package's root folder put on
``sys.path`` the way pytest's own ``prepend`` import mode does for test files:
``mynet/model.py`` becomes ``mynet.model`` and its ``from .blocks import ...``
works. A module name (``mynet.model``) is imported as is; when its package is
not importable but exists under the rootdir, the error names pytest's
``pythonpath`` setting, the fix pytest users know (the plugin does not change
``sys.path`` behind their back for module names).

What a model is made of (which modules, weights files) is not tracked here: the
export cache keys the program ``torch.export`` traces from it (export_key.py).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from pytest_sme2.errors import ModelDefinitionError, UnknownModelError

REQUIRED = ("get_eager_model", "get_example_inputs")
OPTIONAL = ("get_calibration_inputs", "get_dynamic_shapes")


@dataclass(frozen=True)
class ModelSource:
    """Where a registered model comes from; loaded only when first used."""

    name: str
    target: str  # "path/to/file.py" or "importable.module"

    @property
    def is_file(self) -> bool:
        return self.target.endswith(".py") or "/" in self.target or "\\" in self.target


@dataclass(frozen=True)
class Model:
    """A loaded, validated model module."""

    name: str
    module: ModuleType
    source_path: Path | None

    @property
    def description(self) -> str:
        return str(getattr(self.module, "DESCRIPTION", "") or (self.module.__doc__ or "").strip().split("\n")[0])

    def get_eager_model(self):  # noqa: ANN201 - torch type, imported lazily
        return self.module.get_eager_model()

    def get_example_inputs(self) -> tuple:
        inputs = self.module.get_example_inputs()
        return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)

    def get_calibration_inputs(self) -> list[tuple] | None:
        fn: Callable | None = getattr(self.module, "get_calibration_inputs", None)
        if fn is None:
            return None
        return [tuple(s) if isinstance(s, (list, tuple)) else (s,) for s in fn()]

    def get_dynamic_shapes(self) -> "tuple | dict | None":
        """torch.export's ``dynamic_shapes`` for the example inputs (e.g. a sequence length from 1 to the context
        length), or None: a program whose inputs may change size between calls, as a language model's do."""
        fn: Callable | None = getattr(self.module, "get_dynamic_shapes", None)
        return None if fn is None else fn()


class ModelRegistry:
    """Names to model sources. One per pytest session (and per process)."""

    def __init__(self, parent: "ModelRegistry | None" = None, root: Path | None = None) -> None:
        self._sources: dict[str, ModelSource | ModuleType] = {}
        # Where a module name's package is looked for when it cannot be imported (the pytest rootdir).
        self.root = root
        self._loaded: dict[str, Model] = {}
        # A session registry (from ini settings) falls back to the process-wide
        # one that conftest.py files fill through register_model().
        self._parent = parent
        # What an unknown model's error adds about the configuration (the plugin: ini keys it did not read, such
        # as a misspelt sme2_models, whose models are then missing).
        self.settings_note = ""

    def register(self, name: str, target: "str | Path | ModuleType") -> None:
        """Register a model under ``name``; re-registering the same target is a no-op."""
        if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ModelDefinitionError(f"model name {name!r} is not valid: use letters, digits, '_', '-' and '.' only")
        entry: ModelSource | ModuleType = target if isinstance(target, ModuleType) else ModelSource(name, str(target))
        existing = self._sources.get(name)
        if existing is not None and existing != entry:
            raise ModelDefinitionError(
                f"model {name!r} is registered twice: {self._describe(existing)} and {self._describe(entry)}; "
                "rename one of them"
            )
        self._sources[name] = entry

    def register_dir(self, directory: Path) -> None:
        if not directory.is_dir():
            raise ModelDefinitionError(
                f"model directory {directory} (from sme2_model_dirs) does not exist; fix the path in your "
                "pytest configuration"
            )
        for path in sorted(directory.glob("*.py")):
            if not path.name.startswith("_"):
                self.register(path.stem, str(path.resolve()))

    @property
    def names(self) -> list[str]:
        parent = self._parent.names if self._parent is not None else []
        return sorted(set(self._sources) | set(parent))

    def _entry(self, name: str) -> "ModelSource | ModuleType | None":
        entry = self._sources.get(name)
        if entry is None and self._parent is not None:
            entry = self._parent._entry(name)
        return entry

    def _root(self) -> Path:
        root = self.root or (self._parent.root if self._parent is not None else None)
        return root or Path.cwd()

    @staticmethod
    def _describe(entry: "ModelSource | ModuleType") -> str:
        return entry.__name__ if isinstance(entry, ModuleType) else entry.target

    def get(self, name: str) -> Model:
        if name in self._loaded:
            return self._loaded[name]
        entry = self._entry(name)
        if entry is None:
            known = ", ".join(self.names) or "(none)"
            raise UnknownModelError(
                f"unknown model {name!r}. Registered models: {known}. To add one, put a file "
                f"defining get_eager_model() and get_example_inputs() in a directory listed in "
                f"sme2_model_dirs, add '{name} = your.module' to sme2_models, or call "
                f"pytest_sme2.register_model({name!r}, 'your.module') in conftest.py{self.settings_note}"
            )
        module = entry if isinstance(entry, ModuleType) else _import(entry, self._root())
        missing = [fn for fn in REQUIRED if not callable(getattr(module, fn, None))]
        if missing:
            raise ModelDefinitionError(
                f"model {name!r} ({self._describe(entry)}) does not define {', '.join(f + '()' for f in missing)}; "
                "see README 'Onboard your own model'"
            )
        source = getattr(module, "__file__", None)
        model = Model(name, module, Path(source) if source else None)
        self._loaded[name] = model
        return model


def _import(source: ModelSource, root: Path) -> ModuleType:
    try:
        if source.is_file:
            path = Path(source.target)
            if not path.exists():
                raise ModelDefinitionError(f"model {source.name!r}: file {path} does not exist")
            if path.suffix != ".py" and path.is_file():
                raise _not_python(source, path)
            if path.is_dir():
                raise ModelDefinitionError(
                    f"model {source.name!r}: {path} is a folder; register the file that defines get_eager_model() "
                    f"and get_example_inputs(): {source.name} = {path / '__init__.py'} for a package, or its "
                    "module name with the package's folder on pytest's pythonpath setting"
                )
            package = _package_module(path)
            return _import_in_package(source, path, *package) if package else _import_file(source, path)
        if (root / source.target).is_file():  # `w = weights.bin`: a file's name read as a module name
            raise _not_python(source, root / source.target)
        return importlib.import_module(source.target)
    except ModelDefinitionError:
        raise
    except Exception as exc:  # the model's own code failed to import
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        folder = Path(source.target).parent if source.is_file else _module_folder(source.target, root)
        raise ModelDefinitionError(
            f"model {source.name!r}: importing {source.target} failed: {type(exc).__name__}: {first}"
            f"{where_in_author_code(exc, folder)}{_path_hint(source, exc, root)}"
        ) from exc


def _not_python(source: ModelSource, path: Path) -> ModelDefinitionError:
    return ModelDefinitionError(
        f"model {source.name!r}: {path} is not a Python source file; register the .py file "
        "that defines get_eager_model() and get_example_inputs()"
    )


def _import_file(source: ModelSource, path: Path) -> ModuleType:
    """A plain file (no ``__init__.py`` beside it), under a private name of its own."""
    module_name = f"pytest_sme2_models.{source.name.replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise _not_python(source, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _package_module(path: Path) -> tuple[Path, str] | None:
    """(the folder above the outermost package, dotted module name) of a file inside a package, found by
    walking up the ``__init__.py`` files; None for a file outside any package (or with a folder name that
    cannot be a package name)."""
    path = path.resolve()
    own = [] if path.stem == "__init__" else [path.stem]  # a package's __init__.py is the package itself
    packages: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").exists():
        packages.insert(0, folder.name)
        folder = folder.parent
    parts = packages + own
    if not packages or not all(part.isidentifier() for part in parts):
        return None
    return folder, ".".join(parts)


def _import_in_package(source: ModelSource, path: Path, root: Path, dotted: str) -> ModuleType:
    """Import ``dotted`` with ``root`` on sys.path, so the module's relative and absolute imports of its own
    package work; refuse when that name is already another file."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(dotted)
    found = getattr(module, "__file__", None)
    if found is None or Path(found).resolve() != path.resolve():
        raise ModelDefinitionError(
            f"model {source.name!r}: {path} is module {dotted} of the package under {root}, but {dotted} "
            f"imports from {found or 'elsewhere'}: another package of that name comes first on sys.path. "
            "Rename the package, or register the model by module name with the right folder on pytest's "
            "pythonpath setting"
        )
    return module


def _module_folder(target: str, root: Path) -> Path | None:
    """The folder of a model registered by module name (``mynet.model``): its top package's, where it sits in
    ``root`` or on sys.path; None when it cannot be found (the import error then says why)."""
    top = target.split(".")[0]
    for base in (root, *(Path(entry) for entry in sys.path if entry)):
        if (base / top).is_dir():
            return base / top
    return None


def where_in_author_code(exc: BaseException, folder: Path | None) -> str:
    """`` (at FILE:LINE: code)`` for the innermost traceback line in ``folder`` (the model's own folder, so every
    module of a model package counts, not only the file that defines it), outside installed packages; "" when
    there is none. Why: a bad line in mynet/blocks.py was reported at its caller in mynet/model.py."""
    if folder is None:
        return ""
    root = str(folder.resolve())

    def authors(filename: str) -> bool:
        if "site-packages" in filename or "dist-packages" in filename or filename.startswith("<"):
            return False
        try:
            return os.path.commonpath([root, str(Path(filename).resolve())]) == root
        except ValueError:  # another drive
            return False

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if authors(f.filename)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {frame.filename}:{frame.lineno}: {(frame.line or '').strip()})"


def _path_hint(source: ModelSource, exc: Exception, root: Path) -> str:
    """The fix when a module name's package is not importable but sits in the rootdir: pytest's pythonpath."""
    if source.is_file or not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    top = exc.name.split(".")[0]
    if top != source.target.split(".")[0] or not ((root / top).is_dir() or (root / f"{top}.py").is_file()):
        return ""
    if exc.name != top:  # the package imported, so it is on sys.path
        if not source.target.startswith(exc.name):  # an import inside the model's own code: its line says it
            return ""
        package = root.joinpath(*exc.name.split(".")[:-1])  # a module of the registered path is not there (a typo)
        present = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__") if package.is_dir() else []
        return (
            f". {package} has no module {exc.name.rsplit('.', 1)[1]!r}"
            + (f"; its modules: {', '.join(present)}" if present else "")
            + f"; check the module name in {source.name} = {source.target}"
        )
    return (
        f'. {root / top} exists, but {root} is not on sys.path: add pythonpath = ["."] under '
        "[tool.pytest.ini_options] in pyproject.toml (pythonpath = . in pytest.ini or tox.ini), pytest's "
        f"own setting, or register the model by file: {source.name} = {_file_of(source.target, root)}"
    )


def _file_of(target: str, root: Path) -> str:
    """The file a module name stands for under ``root``: a package's ``__init__.py``, else the module's .py."""
    path = "/".join(target.split("."))
    return f"{path}/__init__.py" if (root / path / "__init__.py").is_file() else f"{path}.py"


SOURCE_FILES_LIMIT = 200  # a bigger package is noted by the model's own file and the first others (sorted by path)


def source_files(model: Model) -> dict[str, str]:
    """sha256 (its first 16 hex digits: enough to see a change, small in every baseline record) of each .py file
    of a model's code, by path relative to the folder above its outermost package: every file of that package
    (recursively, up to SOURCE_FILES_LIMIT, the model's own file always) for a model inside a package of the
    user's, else the model's own file alone (also for a module of an installed package: its version says what
    changed, and its tree may be large).

    Why: a baseline keeps these, so a check whose traced program changed can name the files that changed since
    ("mynet/blocks.py"), where the program digest alone says only that something did. Files of the package that
    the model does not import are listed too: the names are a pointer, the program digest is the judge."""
    path = model.source_path
    if path is None or not path.is_file():
        return {}
    path = path.resolve()
    package = path.parent if (path.parent / "__init__.py").exists() else None
    while package is not None and (package.parent / "__init__.py").exists():
        package = package.parent
    if package is not None and {"site-packages", "dist-packages"} & set(package.parts):
        package = None
    base = package.parent if package is not None else path.parent
    others = sorted(f for f in package.rglob("*.py") if f != path) if package is not None else []
    out = {}
    for file in [path, *others][:SOURCE_FILES_LIMIT]:
        try:
            out[file.relative_to(base).as_posix()] = hashlib.sha256(file.read_bytes()).hexdigest()[:16]
        except (OSError, ValueError):  # unreadable, gone, or a link out of the package: not a source of this note
            continue
    return dict(sorted(out.items()))


_default = ModelRegistry()


def default_registry() -> ModelRegistry:
    return _default


def register_model(name: str, target: "str | Path | ModuleType") -> None:
    """Register a model by name: a module object, an importable module path or a .py file."""
    _default.register(name, target)
