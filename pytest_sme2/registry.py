"""The model registry and the onboarding interface.

A model is any module (a file or an importable module) that defines::

    def get_eager_model() -> torch.nn.Module
    def get_example_inputs() -> tuple[torch.Tensor, ...]
    def get_calibration_inputs() -> list[tuple[torch.Tensor, ...]]   # optional, int8 static

and is registered under a name: every ``*.py`` of a directory listed in the
``sme2_model_dirs`` ini setting (name = file stem), a ``name = target`` line of
``sme2_models``, or ``pytest_sme2.register_model(name, target)`` in a
conftest.py. An unknown name is an error listing what is registered: there is
never a fallback to another model.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from .errors import ModelDefinitionError, UnknownModelError

REQUIRED = ("get_eager_model", "get_example_inputs")
OPTIONAL = ("get_calibration_inputs",)


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
    def source_hash(self) -> str:
        """Hash of the module's source file: the model's identity in the export cache."""
        if self.source_path is not None and self.source_path.exists():
            return hashlib.sha256(self.source_path.read_bytes()).hexdigest()
        return hashlib.sha256(repr(self.module).encode()).hexdigest()

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


class ModelRegistry:
    """Names to model sources. One per pytest session (and per process)."""

    def __init__(self, parent: "ModelRegistry | None" = None) -> None:
        self._sources: dict[str, ModelSource | ModuleType] = {}
        self._loaded: dict[str, Model] = {}
        # A session registry (from ini settings) falls back to the process-wide
        # one that conftest.py files fill through register_model().
        self._parent = parent

    def register(self, name: str, target: "str | Path | ModuleType") -> None:
        """Register a model under ``name``; re-registering the same target is a no-op."""
        if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ModelDefinitionError(
                f"model name {name!r} is not valid: use letters, digits, '_', '-' and '.' only"
            )
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
                f"pytest_sme2.register_model({name!r}, 'your.module') in conftest.py"
            )
        module = entry if isinstance(entry, ModuleType) else _import(entry)
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


def _import(source: ModelSource) -> ModuleType:
    try:
        if source.is_file:
            path = Path(source.target)
            if not path.exists():
                raise ModelDefinitionError(f"model {source.name!r}: file {path} does not exist")
            module_name = f"pytest_sme2_models.{source.name.replace('-', '_').replace('.', '_')}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(source.target)
    except ModelDefinitionError:
        raise
    except Exception as exc:  # the model's own code failed to import
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelDefinitionError(
            f"model {source.name!r}: importing {source.target} failed: {type(exc).__name__}: {first}"
        ) from exc


_default = ModelRegistry()


def default_registry() -> ModelRegistry:
    return _default


def register_model(name: str, target: "str | Path | ModuleType") -> None:
    """Register a model by name: a module object, an importable module path or a .py file."""
    _default.register(name, target)
