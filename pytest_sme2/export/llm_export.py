"""ExecuTorch's own LLM export (``export_llama``) as a recipe: what is gated is the program that ships.

An LLM engineer exports with ExecuTorch's LLM flow and an ``LlmConfig`` (params, KV cache, custom SDPA, dynamic
shape, quantization, XNNPACK), not with a pytest-sme2 model module. This runs that flow unchanged, with its
ETRecord on, into the export cache, and returns an ExportedModel like any recipe's: the gate names operators by
their graph nodes (the ETRecord's edge program), baselines key it by name and recipe, and an unchanged config
is a cache hit. The key is the config (minus where it writes), the content of the files it reads (params,
checkpoint) and the tool versions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

from pytest_sme2.errors import DamagedCacheEntryWarning, ExportError, UninitialisedWeightsWarning, UsageError
from pytest_sme2.export.cache_entry import (
    ETRECORD_NAME,
    EXPORT_FORMAT_VERSION,
    INPUTS_NAME,
    META_NAME,
    PTE_NAME,
    DamagedEntry,
    check_files,
    first_line,
    read_meta,
    record_problem,
)
from pytest_sme2.export.export import (
    ExportedModel,
    Recipe,
    _delegation_record,
    staged_entry,
    versions,
    write_entry_meta,
)
from pytest_sme2.export.export_key import KEY_CHARS
from pytest_sme2.system.digests import file_sha256
from pytest_sme2.system.last_use import mark_used
from pytest_sme2.system.locks import entry_lock

FLOW = "export_llama"
# Tokens of the example prompt saved as the entry's inputs: ids 1..N at position 0, int64, as ExecuTorch's llama
# runner passes them (measure/llm.py uses the same for a .pte path).
EXAMPLE_TOKENS = 32
# Config fields that say where the export writes or that pytest-sme2 sets itself: not in the key.
_NOT_IN_KEY = {("export", "output_dir"), ("export", "output_name"), ("debug", "generate_etrecord")}
# Config fields naming files whose content the export reads.
_READ_FILES = (("base", "params"), ("base", "checkpoint"))
# The files an export_llm entry holds, each with its sha256 in export.json (no eager reference outputs).
LLM_FILES = (PTE_NAME, ETRECORD_NAME, INPUTS_NAME)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _llm_config_class() -> Any:
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    return LlmConfig


def llm_config(config: Any) -> Any:
    """An ``LlmConfig`` from one, or from a mapping of dotted fields (``{"model.use_kv_cache": True}``) set on
    ExecuTorch's defaults; an unknown field is a UsageError naming it."""
    config_class = _llm_config_class()
    if isinstance(config, config_class):
        return copy.deepcopy(config)
    if not isinstance(config, Mapping):
        raise UsageError(
            f"export_llm() takes ExecuTorch's LlmConfig or a mapping of its dotted fields "
            f"(e.g. {{'base.params': 'params.json'}}), got {type(config).__name__}"
        )
    made = config_class()
    for dotted, value in config.items():
        *path, field = str(dotted).split(".")
        part = made
        for name in path:
            part = getattr(part, name, None)
        if not path or part is None or not dataclasses.is_dataclass(part) or not hasattr(part, field):
            sections = ", ".join(f.name for f in dataclasses.fields(made))
            raise UsageError(
                f"export_llm(): {dotted!r} is not a field of ExecuTorch's LlmConfig; fields are "
                f"dotted paths such as model.use_kv_cache or backend.xnnpack.enabled, under one of "
                f"{sections}"
            )
        setattr(part, field, _as_field_type(part, field, value, str(dotted)))
    return made


def _as_field_type(part: Any, field: str, value: Any, dotted: str) -> Any:
    """``value`` for an enum field given by its value or name as a string (``"smollm2"`` for ModelType.smollm2),
    as ExecuTorch's own command line gives it; export_llama reads ``.value`` of these and failed on a string
    with "'str' object has no attribute 'value'" (issue 65). Other values are set as they are."""
    import enum
    import typing

    if not isinstance(value, str):
        return value
    try:
        hint = typing.get_type_hints(type(part)).get(field)
    except Exception:  # noqa: BLE001 - a config class whose hints do not resolve: set the value as given
        return value
    kinds = [hint, *typing.get_args(hint)]  # Optional[X] is Union[X, None]
    enum_type = next((k for k in kinds if isinstance(k, type) and issubclass(k, enum.Enum)), None)
    if enum_type is None:
        return value
    for member in enum_type:
        if value in (member.value, member.name):
            return member
    raise UsageError(
        f"export_llm(): {dotted}={value!r} is not one of ExecuTorch's {enum_type.__name__} values: "
        f"{', '.join(str(m.value) for m in enum_type)}"
    )


def _plain(value: Any) -> Any:
    """JSON-able form of a config value (enums by value, dataclasses by fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "value") and type(value).__module__ != "builtins":
        return _plain(value.value)
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _read_file(config: Any, section: str, field: str) -> Path | None:
    value = getattr(getattr(config, section), field, None)
    if not value:
        return None
    path = Path(str(value)).expanduser()
    if not path.is_file():
        raise UsageError(
            f"export_llm(): {section}.{field}={str(value)!r} is not a file; give the path of the "
            f"{field} file ExecuTorch's LLM export reads"
        )
    return path


def _keyed(config: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """What of ``config`` decides the program: its fields without where it writes and without the paths of the
    files it reads, and those files' sha256 by field. The key digests both; an entry records both, so a hit is
    compared field by field with the request (an entry copied under another config's key is refused)."""
    plain = _plain(config)
    for section, field in _NOT_IN_KEY:
        plain.get(section, {}).pop(field, None)
    files = {}
    for section, field in _READ_FILES:
        path = _read_file(config, section, field)
        if path is not None:
            files[f"{section}.{field}"] = file_sha256(path)
            plain[section].pop(field, None)  # the path does not matter, the content does
    return plain, files


def config_key(config: Any) -> str:
    """The cache key of an export: the config without where it writes, the read files' content, the versions."""
    plain, files = _keyed(config)
    document = {
        "flow": FLOW,
        "config": plain,
        "files": files,
        "versions": versions(),
        "code": file_sha256(Path(__file__)),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:KEY_CHARS]


def recipe_of(config: Any) -> Recipe:
    """The recipe label the program's baselines carry: its precision, quantization and partitioner."""
    dtype = _plain(config.model.dtype_override) or "fp32"
    qmode = config.quantization.qmode
    partitioner = "xnnpack" if config.backend.xnnpack.enabled else "none"
    if qmode:
        if qmode != "8da4w":
            raise UsageError(
                f"export_llm(): quantization.qmode={qmode!r} has no pytest-sme2 recipe label; "
                f"8da4w (int8 dynamic activations, int4 grouped weights) is the one supported"
            )
        return Recipe("int8", "8da4w", partitioner)
    if dtype not in ("fp32", "fp16"):
        raise UsageError(
            f"export_llm(): model.dtype_override={dtype!r}: pytest-sme2's recipes are fp32 and fp16 "
            f"(and 8da4w quantization)"
        )
    return Recipe(dtype, None, partitioner)


def _differences(recorded: Any, asked: Any, where: str = "") -> list[str]:
    """The dotted fields whose recorded value is not the one asked for (``model.max_context_length 64, asked
    128``), at most a few: what a refused entry's warning names."""
    if isinstance(recorded, dict) and isinstance(asked, dict):
        found: list[str] = []
        for field in sorted(set(recorded) | set(asked)):
            found += _differences(recorded.get(field), asked.get(field), f"{where}.{field}" if where else field)
        return found
    return [] if recorded == asked else [f"{where or 'config'} {recorded!r}, asked {asked!r}"]


def entry_problem(meta: Any, key: str, name: str, recipe: Recipe, config: Any) -> str | None:
    """What keeps an export_llm entry's export.json from answering for this request, or None: its format, flow,
    key, model name and recipe, the config and read files it records against the ones asked for (the key alone
    is a field anyone who copies an entry can edit), and the shape of every field a hit returns."""
    if not isinstance(meta, dict):
        return f"{META_NAME} holds a JSON {type(meta).__name__}, not an object"
    for field, want in (
        ("format", EXPORT_FORMAT_VERSION),
        ("flow", FLOW),
        ("cache_key", key),
        ("model", name),
        ("recipe", dataclasses.asdict(recipe)),
    ):
        if meta.get(field) != want:
            return f"{META_NAME}'s {field} is {meta.get(field)!r}, and this export_llm asks for {want!r}"
    plain, files = _keyed(config)
    for field, want in (("keyed_config", plain), ("read_files", files)):
        if meta.get(field) != want:
            shown = "; ".join(_differences(meta.get(field), want)[:3])
            return f"{META_NAME} records another {'config' if field == 'keyed_config' else 'read file'}: {shown}"
    problem = record_problem(meta, LLM_FILES)
    if problem:
        return problem
    if meta.get("program_digest") != meta["files"][PTE_NAME]:
        return f"{META_NAME}'s program_digest {meta.get('program_digest')!r} is not its {PTE_NAME}'s sha256"
    return None


def _load(directory: Path, key: str, name: str, recipe: Recipe, config: Any, warn: bool) -> ExportedModel | None:
    """The entry if it is whole and answers this request; None (a miss) otherwise, a damaged one said so with
    ``warn`` (the look under the entry's lock, before it is exported again), as the model export cache does."""
    if not os.path.lexists(directory):
        return None
    try:
        if directory.is_symlink() or not directory.is_dir():
            raise DamagedEntry("it is not a folder")
        meta = read_meta(directory)
        if isinstance(meta, dict) and meta.get("flow") == FLOW and "keyed_config" not in meta:
            return None  # written before entries recorded their config: stale, exported again without a word
        problem = entry_problem(meta, key, name, recipe, config)
        if problem:
            raise DamagedEntry(problem)
        check_files(directory, meta)
    except DamagedEntry as damage:
        if warn:
            warnings.warn(
                DamagedCacheEntryWarning(f"export cache entry {directory} is damaged ({damage}); it is exported again")
            )
        return None
    mark_used(directory / META_NAME)  # a hit: the entry is the most recently used (pytest-sme2 cache prune)
    return ExportedModel(
        name,
        recipe,
        directory,
        key,
        True,
        float(meta["export_seconds"]),
        meta["delegation"],
        meta["program_digest"],
    )


def check_name(name: str) -> str:
    """``name`` when it can name a cache entry's folder and baselines (letters, digits, '_', '-', '.', not
    starting with '.'); a UsageError before minutes of export otherwise (``../escaped`` wrote outside the cache,
    ``a/b`` failed after the export with a bare FileNotFoundError)."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"export_llm(): name {name!r} is not valid: it names the cache entry's folder and the baselines, so "
            "use letters, digits, '_', '-' and '.' only, starting with a letter or digit (e.g. name='tiny_llama')"
        )
    return name


def export_llm(config: Any, cache_dir: Path, name: str | None = None) -> ExportedModel:
    """ExecuTorch's ``export_llama`` of ``config`` (an LlmConfig or a mapping of dotted fields), cached.

    ``name``: the model's name in labels and baselines (default: the params file's stem, else "llm")."""
    started = time.perf_counter()  # the export's one duration (ExportedModel.export_seconds), cache key included
    config = llm_config(config)
    params = _read_file(config, "base", "params")
    name = check_name(name if name is not None else (params.stem if params is not None else "llm"))
    _refuse_several_methods(config, name)
    if not getattr(config.base, "checkpoint", None):
        warnings.warn(UninitialisedWeightsWarning(_NO_CHECKPOINT.format(name=name)), stacklevel=2)
    recipe = recipe_of(config)
    key = config_key(config)
    final = cache_dir / f"{name}-{FLOW}-{recipe.label}-{key}"
    cached = _load(final, key, name, recipe, config, warn=False)
    if cached is not None:
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    with entry_lock(cache_dir, final.name):
        cached = _load(final, key, name, recipe, config, warn=True)
        if cached is not None:
            return cached
        if final.is_symlink() or final.is_file():
            final.unlink()
        shutil.rmtree(final, ignore_errors=True)  # a damaged or other entry under this name
        keyed_config, read_files = _keyed(config)  # before the export sets where it writes
        with staged_entry(cache_dir, final) as staging:
            delegation = _export_into(config, staging, name, recipe)
            files = {n: file_sha256(staging / n) for n in LLM_FILES}
            seconds = time.perf_counter() - started
            meta = {
                "format": EXPORT_FORMAT_VERSION,
                "model": name,
                "flow": FLOW,
                "recipe": dataclasses.asdict(recipe),
                "cache_key": key,
                "program_digest": files[PTE_NAME],
                **versions(),
                "export_seconds": seconds,
                "delegation": delegation,
                "source": str(params) if params else None,
                "config": _plain(config),
                "keyed_config": keyed_config,
                "read_files": read_files,
                "files": files,
            }
            write_entry_meta(staging, meta)
    return ExportedModel(name, recipe, final, key, False, seconds, delegation, meta["program_digest"])


def _refuse_several_methods(config: Any, name: str) -> None:
    """ExecuTorch's multimethod LLM export (``multimethod.methods``) is refused before minutes of export: the
    entry's delegation record and graph nodes are one method's (what the gate and headlines read), and
    export_llama's multimethod program has no ``forward`` to read them from. The same program runs as a path.
    Refused on ExecuTorch's own test (``MultimethodConfig.enabled``), the one export_llama branches on."""
    if config.multimethod.enabled:
        methods = [getattr(m, "method_name", str(m)) for m in config.multimethod.methods]
        raise UsageError(
            f"export_llm {name!r}: multimethod.methods = {methods} asks ExecuTorch's multimethod export, which "
            "export_llm does not run: its cache entry keeps one method's graph nodes. Export it with "
            "export_llama yourself and pass the .pte path: llm_profile(path, runner, prefill_method=..., "
            'decode_method=...) runs the methods and shares their cache (docs/llm.md, "The calls")'
        )


@contextlib.contextmanager
def _lowered_program() -> Iterator[list[dict[str, Any]]]:
    """The delegation record of the program export_llama lowers, read as it enters ``to_executorch``: the graph
    whose nodes the gate pairs operators by, as pytest-sme2's own export reads it (the ETRecord keeps the program
    before lowering, and after to_executorch the delegates are single call nodes)."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    records: list[dict[str, Any]] = []
    original = LLMEdgeManager.to_executorch

    def to_executorch(self: Any, *args: Any, **kwargs: Any) -> Any:
        records.append(_delegation_record(self.edge_manager.exported_program()))
        return original(self, *args, **kwargs)

    LLMEdgeManager.to_executorch = to_executorch
    try:
        yield records
    finally:
        LLMEdgeManager.to_executorch = original


_NO_CHECKPOINT = (
    "export_llm({name!r}) has no base.checkpoint: ExecuTorch's export_llama then builds the model on the meta "
    "device and to_empty() leaves what reset_parameters() does not set (the RMSNorm weights, the rope tables, the "
    "causal mask, the KV cache) as the heap held them, so the program computes with garbage (inf or NaN logits) and "
    "each export may differ. Instruction counts of XNNPACK's kernels do not depend on the values, but outputs mean "
    "nothing: give base.checkpoint a seeded state dict (docs/llm.md, 'Random weights')"
)


def _missing_package(config: Any, exc: ImportError) -> str:
    """The error of an export whose model class imports a package that is missing or does not import: the
    package, the class, and the way round that worked (issue 65: smollm2 imports torchtune even without a
    checkpoint, and torchtune 0.6.1 does not import beside torchao 0.18)."""
    from pytest_sme2.export.llm_families import FAMILY_OF_CLASS

    missing = getattr(exc, "name", None) or str(exc)
    model_class = _plain(getattr(config.base, "model_class", None))
    family = FAMILY_OF_CLASS.get(str(model_class))
    way_round = (
        f", or export the same transformer through the llama model class, which needs nothing more: "
        f"base.model_class='llama3' with base.params=pytest_sme2.llm_params({family!r}, FOLDER) (its published "
        "shape, random weights; docs/llm.md, 'Model families')"
        if family
        else " (docs/llm.md, 'Model families', says which families export here and how)"
    )
    return (
        f"ExecuTorch's LLM export of model class {model_class!r} needs the package {missing!r}, which "
        f"{'is not installed' if isinstance(exc, ModuleNotFoundError) else 'does not import'} here "
        f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else missing}). Install it "
        f"(`pip install {missing.split('.')[0]}`, checking that it imports beside this torch and torchao)"
        f"{way_round}"
    )


def _export_into(config: Any, out: Path, name: str, recipe: Recipe) -> dict[str, Any]:
    """Run export_llama writing into ``out``; the ETRecord, the example prompt and the delegation record."""
    import torch

    config.export.output_dir = str(out)
    config.export.output_name = str(out / PTE_NAME)
    config.debug.generate_etrecord = True
    try:
        from executorch.examples.models.llama.export_llama_lib import export_llama

        with _lowered_program() as lowered:
            export_llama(config)
    except ImportError as exc:  # a model class whose module needs a package this environment lacks
        raise ExportError(_missing_package(config, exc), detail=traceback.format_exc()) from None
    except Exception as exc:
        offline = any(word in f"{type(exc).__name__} {exc}" for word in ("LocalEntryNotFound", "ConnectError"))
        raise ExportError(
            f"ExecuTorch's LLM export (export_llama) of {name!r} ({recipe.label}) failed: {first_line(exc)}"
            + (
                "; its model class downloads from the Hugging Face hub, which this machine cannot reach: "
                "export it where it can, or through base.model_class='llama3' with params of its shape"
                if offline
                else ""
            ),
            detail=traceback.format_exc(),
        ) from None
    written = out / "etrecord.bin"  # export_llama writes its ETRecord beside the model under this name
    if not (out / PTE_NAME).is_file() or not written.is_file():
        raise ExportError(
            f"ExecuTorch's LLM export of {name!r} finished without writing {PTE_NAME} and its "
            f"ETRecord in {out}; files there: {sorted(p.name for p in out.iterdir())}"
        )
    written.rename(out / ETRECORD_NAME)
    tokens = torch.arange(1, EXAMPLE_TOKENS + 1, dtype=torch.long).reshape(1, -1)
    torch.save((tokens, torch.tensor([0], dtype=torch.long)), out / INPUTS_NAME)
    # No eager reference: ExecuTorch's flow builds its model itself; outputs are checked against eager in
    # pytest-sme2's own exports of the same model (tests/measure/test_llm.py).
    if not lowered:
        import executorch.version

        raise ExportError(
            f"ExecuTorch's LLM export of {name!r} never reached LLMEdgeManager.to_executorch, where "
            f"pytest-sme2 reads the lowered program's graph nodes: executorch 1.4.1's and 1.5.1's export_llama "
            f"call it, this executorch {executorch.version.__version__.split('+')[0]}'s did not"
        )
    return lowered[-1]


__all__ = ["export_llm", "llm_config", "recipe_of", "config_key"]
