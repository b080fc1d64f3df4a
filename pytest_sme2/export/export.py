"""Export recipes and the content-addressed export cache.

A recipe is data (dtype, int8 quantisation mode, partitioner). An export traces the model every time
(stage 1) and keys the cache by that traced program's content, inputs, recipe and versions
(export_key.py): no list of source files is complete, the traced program is. Lowering (stage 2) runs only
on a miss, under a lock per key, and every use of an entry checks its files' sha256. docs/export.md.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import logging
import os
import shutil
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pytest_sme2.errors import DamagedCacheEntryWarning, ExportError, StorageError, UsageError
from pytest_sme2.export import export_key
from pytest_sme2.export.cache_entry import (
    CHECKED_FILES,
    ETRECORD_NAME,
    EXPORT_FORMAT_VERSION,
    INPUTS_NAME,
    META_NAME,
    PTE_NAME,
    REFERENCE_NAME,
    DamagedEntry,
    check_facts,
    check_files,
    first_line,
    meta_problem,
    read_meta,
)
from pytest_sme2.export.graph_nodes import graph_nodes
from pytest_sme2.export.work import FACTS_FILE, facts_document, write_facts
from pytest_sme2.model.registry import Model, where_in_author_code
from pytest_sme2.system.digests import file_sha256, tree_digest
from pytest_sme2.system.last_use import mark_used
from pytest_sme2.system.locks import entry_lock

# Everything that turns a traced program into a cache entry (lowering, quantization, partitioner settings,
# the facts and reference outputs written beside the program) is in this folder: its source is in every key,
# so a pytest-sme2 upgrade or an edit that lowers differently is a miss, not a stale program.
EXPORT_CODE = Path(__file__).resolve().parent
EXPORT_CODE_SUFFIXES = (".py",)
DTYPES = ("fp32", "fp16", "int8")
QUANT_MODES = ("static", "dynamic", "8da4w")
# The quantized LLM recipe ExecuTorch's LLM export calls 8da4w: int8 activations quantized dynamically, int4
# weights in groups of this many input channels (its source transformation, qmode "8da4w"), applied to the eager
# model before torch.export; linears whose input width is not a multiple of the group stay float, as there.
GROUP_SIZE_8DA4W = 32
PARTITIONERS = ("xnnpack", "none")


@dataclass(frozen=True)
class Recipe:
    """How to export: precision, int8 quantisation mode and partitioner."""

    dtype: str = "fp32"
    quant: str | None = None
    partitioner: str = "xnnpack"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype={self.dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        if self.dtype == "int8":
            quant = self.quant or "static"
            if quant not in QUANT_MODES:
                raise UsageError(f"quant={self.quant!r} is not supported for int8; use one of {', '.join(QUANT_MODES)}")
            object.__setattr__(self, "quant", quant)
        elif self.quant is not None:
            raise UsageError(f"quant={self.quant!r} only applies to dtype='int8' (got dtype={self.dtype!r})")
        if self.partitioner not in PARTITIONERS:
            raise UsageError(f"partitioner={self.partitioner!r} is not supported; use one of {', '.join(PARTITIONERS)}")

    @property
    def label(self) -> str:
        parts = [self.dtype] + ([self.quant] if self.quant else []) + [self.partitioner]
        return "-".join(parts)


@dataclass
class ExportedModel(os.PathLike):
    """A .pte in the export cache, with its ETRecord, inputs and delegation record.

    It is path-like: ``open(exported_pte, "rb")`` and ``Path(exported_pte)`` work.
    """

    model: str
    recipe: Recipe
    directory: Path
    cache_key: str
    from_cache: bool
    # How long the export that made the entry took, from the start of export() to its files' digests (trace, cache
    # key, lookups, lowering): export.json's record, repr() and the progress line's "exported ... in" read this one
    # measure (issue 65: they once read 177.9 s and 195.5 s of one export). A hit keeps the original export's.
    export_seconds: float
    delegation: dict[str, Any] = field(default_factory=dict)
    program_digest: str | None = None  # export_key.program_digest of the traced program (recipe-independent)
    trace_seconds: float = 0.0  # stage 1 (build the eager model and torch.export it) in this process

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def path(self) -> Path:
        return self.directory / PTE_NAME

    @property
    def etrecord_path(self) -> Path:
        return self.directory / ETRECORD_NAME

    @property
    def inputs_path(self) -> Path:
        return self.directory / INPUTS_NAME

    @property
    def reference_outputs_path(self) -> Path:
        return self.directory / REFERENCE_NAME

    @property
    def label(self) -> str:
        return f"{self.model} {self.recipe.label}"

    def __repr__(self) -> str:
        state = "cached" if self.from_cache else f"exported in {self.export_seconds:.1f} s"
        return f"ExportedModel({self.label}, {self.path}, {state})"


@dataclass
class Traced:
    """Stage 1 of an export: the eager model prepared for the recipe, its inputs and its ATen program."""

    eager: Any
    inputs: tuple
    program: Any  # torch.export.ExportedProgram
    calibration: list[tuple] | None  # int8 static only: the values the quantizer observes
    digest: str
    key: str
    seconds: float


def tool_versions() -> dict[str, str]:
    """torch's, executorch's and torchao's versions as plain strings: torch's own is a str subclass (TorchVersion)
    that pytest-xdist cannot send from a worker to the controller inside a test's report. torchao is in because
    int8 programs are quantized by its pt2e flow (prepare_pt2e / convert_pt2e): a torchao upgrade under pinned
    torch and executorch can change them."""
    import executorch.version
    import torch

    return {
        "torch": str(torch.__version__),
        "executorch": str(executorch.version.__version__),
        "torchao": installed_version("torchao"),
    }


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution`` (from its metadata, without importing it), or "not installed"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def export_code_digest() -> str:
    """sha256 of pytest-sme2's export code (every ``.py`` file of this folder)."""
    return tree_digest(EXPORT_CODE, EXPORT_CODE_SUFFIXES)


def versions() -> dict[str, Any]:
    """The tool versions, the export code and the format in every cache key."""
    return {"format": EXPORT_FORMAT_VERSION, "export_code": export_code_digest(), **tool_versions()}


def trace(model: Model, recipe: Recipe) -> Traced:
    """Stage 1: the program the recipe would lower, and the cache key describing it."""
    import torch

    started = time.perf_counter()
    with _reporting(model, recipe) as stage:
        stage.name = "building the eager model"
        eager = model.get_eager_model().eval()
        stage.name = "preparing inputs"
        inputs = model.get_example_inputs()
        if recipe.quant == "8da4w":
            stage.name = "8da4w quantisation (ExecuTorch's LLM quantize, torchao)"
            eager = _quantize_8da4w(eager)
        if recipe.dtype == "fp16":
            eager = eager.half()
            inputs = tuple(x.half() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
        calibration = None
        if recipe.dtype == "int8" and recipe.quant == "static":
            # A model without get_calibration_inputs() is calibrated on its example inputs
            # (README 'Onboard your own model').
            stage.name = "getting calibration inputs"
            calibration = model.get_calibration_inputs() or [inputs]
        stage.name = "getting dynamic shapes"
        dynamic_shapes = model.get_dynamic_shapes()
        stage.name = "torch.export"
        # For inference: no autograd state (a KV cache written in place under autograd stops torch.export with
        # "a leaf Variable that requires grad is being used in an in-place operation"), as ExecuTorch's own LLM
        # export does.
        eager.requires_grad_(False)
        try:
            with torch.no_grad():
                program = torch.export.export(eager, inputs, dynamic_shapes=dynamic_shapes)
        except Exception:
            # A forward that fails by itself is the model author's to fix, not an export problem: say so.
            stage.name = "running the eager model"
            with torch.no_grad():
                eager(*inputs)
            stage.name = "torch.export"
            raise
        stage.name = "computing the cache key"
        digest = export_key.program_digest(program, inputs, calibration)
    _check_returns_tensors(model, recipe, program)
    key = export_key.cache_key(digest, asdict(recipe), versions())
    return Traced(eager, inputs, program, calibration, digest, key, time.perf_counter() - started)


def _check_returns_tensors(model: Model, recipe: Recipe, program: Any) -> None:
    """A forward() that returns no tensor (None, or only constants) has nothing for the runtime to output:
    lowering it ended in ``KeyError: 'op_type'`` deep inside ExecuTorch; say what the model must return."""
    from torch.export.graph_signature import OutputKind, TensorArgument

    if any(
        spec.kind == OutputKind.USER_OUTPUT and isinstance(spec.arg, TensorArgument)
        for spec in program.graph_signature.output_specs
    ):
        return
    where = f" in {model.source_path}" if model.source_path else ""
    returned = (
        ", ".join(
            repr(getattr(spec.arg, "value", spec.arg))
            for spec in program.graph_signature.output_specs
            if spec.kind == OutputKind.USER_OUTPUT
        )
        or "nothing"
    )
    raise ExportError(
        f"export of model {model.name!r} with recipe {recipe.label}: its forward() returned no tensors "
        f"(only {returned}); the model must return a tensor, or a tuple, list or dict of tensors, "
        f"for the runtime to have outputs: fix forward(){where}"
    )


def cache_key(model: Model, recipe: Recipe) -> str:
    """The key ``model`` exported with ``recipe`` has in the cache now (runs stage 1)."""
    return trace(model, recipe).key


def _other_request(meta: dict[str, Any], inputs: Path, model: str, recipe: Recipe, traced: Traced) -> str | None:
    """Why a whole entry (every file matching its digest) answers for another export than this one, or None.

    Why: the digests in export.json only say the files are the ones export.json names; a shared cache (a group
    folder, a CI cache restored from another branch) can hold an entry whose files and digests were written
    for another model. So what the entry says it came from is checked against the request: its key is derived
    again from its program digest, recipe and versions, its model and recipe are this export's, and its
    inputs.pt holds this model's example inputs (which the program digest covers). A writer who forges all of
    that consistently is trusted by design: see docs/export.md, "Who may write the cache"."""
    import torch

    claimed = export_key.cache_key(
        str(meta.get("program_digest")), meta.get("recipe"), {name: meta.get(name) for name in versions()}
    )
    if claimed != traced.key:
        return (
            f"{META_NAME}'s program digest, recipe and versions give the key {claimed}, not this entry's "
            f"{traced.key}: it answers for another export"
        )
    if meta.get("model") != model or meta.get("recipe") != asdict(recipe):
        return f"{META_NAME} answers for {meta.get('model')!r} {meta.get('recipe')!r}, not {model!r} {asdict(recipe)!r}"
    try:
        stored = torch.load(inputs, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable inputs file is a damaged entry
        return f"{INPUTS_NAME} does not load ({first_line(exc)})"
    if export_key.inputs_digest(stored) != export_key.inputs_digest(traced.inputs):
        return (
            f"{INPUTS_NAME} is not {model}'s example inputs: the program in this entry was exported from another model"
        )
    return None


def _load_entry(directory: Path, model: str, recipe: Recipe, traced: Traced) -> ExportedModel | None:
    """The entry at ``directory``; None when there is none; DamagedEntry when its metadata does not decode or a
    file is not what its export wrote (an entry is written once, by its export, and never changed)."""
    if not os.path.lexists(directory):
        return None
    meta = read_meta(directory)
    problem = meta_problem(meta, traced.key, traced.digest)
    if problem:
        raise DamagedEntry(problem)
    check_files(directory, meta)
    answered = _other_request(meta, directory / INPUTS_NAME, model, recipe, traced)
    if answered:
        raise DamagedEntry(answered)
    check_facts(directory)
    mark_used(directory / META_NAME)  # a hit: the entry is the most recently used (pytest-sme2 cache prune)
    return ExportedModel(
        model=model,
        recipe=recipe,
        directory=directory,
        cache_key=traced.key,
        from_cache=True,
        export_seconds=float(meta["export_seconds"]),
        delegation=meta["delegation"],
        program_digest=traced.digest,
        trace_seconds=traced.seconds,
    )


def _discard(directory: Path, model: Model, recipe: Recipe, damage: DamagedEntry) -> None:
    """Report a damaged entry by its own path (not a session's copy of it) and remove it."""
    warnings.warn(
        DamagedCacheEntryWarning(
            f"export cache entry {os.path.abspath(directory)} is damaged: {damage}. It is not used: it is removed and "
            f"{model.name} {recipe.label} is exported again. Entries are written once by their export and "
            f"session artifacts are copies, so something else wrote into the cache."
        ),
        stacklevel=3,
    )
    try:
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory)
        else:
            directory.unlink()
    except OSError as exc:
        raise StorageError(
            f"export cache entry {directory} is damaged ({damage}) and cannot be removed: "
            f"{first_line(exc)}. Remove it by hand, or use another --sme2-cache-dir"
        ) from None


def export(model: Model, recipe: Recipe, cache_dir: Path) -> ExportedModel:
    """Return the cached export of ``model`` with ``recipe``, lowering it first if needed.

    The entry is looked up, and stored, under the key of the program traced here: what it holds is
    what the model is now. A damaged entry is reported, removed and exported again, by one process.
    """
    started = time.perf_counter()  # the export's one duration (ExportedModel.export_seconds) starts here
    traced = trace(model, recipe)
    final = cache_dir / f"{model.name}-{recipe.label}-{traced.key}"
    try:
        cached = _load_entry(final, model.name, recipe, traced)
    except DamagedEntry:
        cached = None  # looked at again under the lock: another process may be replacing it right now
    if cached is not None:
        return cached
    with entry_lock(cache_dir, final.name):
        try:
            cached = _load_entry(final, model.name, recipe, traced)  # another worker may have finished it
        except DamagedEntry as damage:
            _discard(final, model, recipe, damage)
            cached = None
        if cached is not None:
            return cached
        with _disk_full_named(model, recipe, cache_dir), staged_entry(cache_dir, final) as staging:
            delegation = _lower_into(model, recipe, traced, staging)
            files = {name: file_sha256(staging / name) for name in CHECKED_FILES}
            seconds = time.perf_counter() - started
            meta = {
                "model": model.name,
                "recipe": asdict(recipe),
                "cache_key": traced.key,
                "program_digest": traced.digest,
                **versions(),
                "export_seconds": seconds,
                "delegation": delegation,
                "source": str(model.source_path) if model.source_path else None,
                "files": files,
            }
            write_entry_meta(staging, meta)
    return ExportedModel(
        model.name, recipe, final, traced.key, False, seconds, delegation, traced.digest, traced.seconds
    )


@contextlib.contextmanager
def staged_entry(cache_dir: Path, final: Path) -> Iterator[Path]:
    """A fresh staging folder for the entry ``final`` (the caller holds its lock): renamed to ``final`` when the
    block ends, removed when it fails, so a reader never sees half an entry."""
    _remove_stale_staging(cache_dir)
    staging = cache_dir / f".staging-{final.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_entry_meta(staging: Path, meta: dict[str, Any]) -> None:
    """export.json, and the program's planned memory and per-operator work read from its .pte (ExecuTorch's
    exporter is loaded by then)."""
    (staging / META_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True))
    write_facts(facts_document(staging / PTE_NAME), staging / FACTS_FILE)


def _remove_stale_staging(cache_dir: Path) -> None:
    """Remove the staging folders of exports whose process is gone (a SIGKILLed export never reaches its
    cleanup). A folder's owner is the pid at the end of its name; a live process's folder is left alone."""
    for folder in cache_dir.glob(".staging-*-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


@contextlib.contextmanager
def _disk_full_named(model: Model, recipe: Recipe, cache_dir: Path) -> Iterator[None]:
    """A full disk while an export writes its entry, as a StorageError naming the cache folder, the model (said to
    be pytest-sme2's own reference program when it is: the user never asked for that one) and the fix, instead of
    an ExportError quoting the errno and a line of ExecuTorch's serializer (issue 64)."""
    try:
        yield
    except (OSError, ExportError) as exc:
        cause: BaseException | None = exc
        while cause is not None and not (isinstance(cause, OSError) and cause.errno in _FULL):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        from pytest_sme2.export import reference_program

        what = (
            "pytest-sme2's reference program (exported once per cache for relative latency; not one of your models)"
            if model.name == reference_program.NAME
            else f"model {model.name!r}"
        )
        raise StorageError(
            f"no space left on the device while exporting {what} with recipe {recipe.label} into the export cache "
            f"{cache_dir}: free space there, or point --sme2-cache-dir (or ini sme2_cache_dir) at a folder on a "
            "larger disk"
        ) from None


class _Stage:
    """What an export is doing, for its error message."""

    name = "starting"


@contextlib.contextmanager
def _reporting(model: Model, recipe: Recipe) -> Iterator[_Stage]:
    """Turn any failure inside into an ExportError naming the stage and the model's own failing line; keep
    torch's trace log from propagating meanwhile (see _TORCH_TRACE) and put its last records in the detail."""
    stage = _Stage()
    trace_records: collections.deque[str] = collections.deque(maxlen=_TRACE_RECORDS)
    logger = logging.getLogger(_TORCH_TRACE)
    keeper = _Keep(trace_records)
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(keeper)  # torch logs its trace records only while the logger has a handler
    logger.addFilter(keeper.take)  # and they stop here even if something sets propagate meanwhile
    # ExecuTorch warns once per symbolic size of a dynamic-shape program that it "did not appear in the graph
    # that was deserialized" when the ETRecord is written: dozens of lines in pytest's captured log of every
    # failing test that exported an LLM, about nothing the user can act on. Its errors still show.
    serde = logging.getLogger(_EXECUTORCH_SERDE)
    serde_level = serde.level
    serde.setLevel(max(serde.getEffectiveLevel(), logging.ERROR))
    try:
        yield stage
    except Exception as exc:
        raise ExportError(
            f"export of model {model.name!r} with recipe {recipe.label} failed while {stage.name}: "
            f"{first_line(exc)}{_where_in_model(exc, model)}",
            detail=traceback.format_exc() + _trace_log(trace_records),
        ) from None
    finally:
        logger.removeFilter(keeper.take)
        logger.removeHandler(keeper)
        logger.propagate = propagate
        serde.setLevel(serde_level)


def _lower_into(model: Model, recipe: Recipe, traced: Traced, out: Path) -> dict[str, Any]:
    """Stage 2: quantize (int8) and lower the traced program; write pte, etrecord, inputs, reference
    outputs; return delegation info."""
    import torch

    inputs = traced.inputs
    with _reporting(model, recipe) as stage:
        stage.name = "running the eager model"
        with torch.no_grad():
            reference = traced.eager(*inputs)
        exported = traced.program
        if recipe.dtype == "int8" and recipe.quant != "8da4w":  # 8da4w quantized the eager model in trace()
            stage.name = f"int8 {recipe.quant} quantisation"
            exported = _quantize(recipe, exported, inputs, traced.calibration, model.get_dynamic_shapes())
            # The reference of an int8 program is the quantized model in PyTorch eager
            # (quantize/dequantize simulated in float), not the float model: that is what
            # the runtime must reproduce, so output checks can use tight tolerances.
            stage.name = "running the quantized eager model"
            with torch.no_grad():
                reference = exported.module()(*inputs)
        stage.name = f"lowering ({recipe.partitioner})"
        from executorch.exir import to_edge_transform_and_lower

        partitioners = []
        if recipe.partitioner == "xnnpack":
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

            partitioners = [XnnpackPartitioner()]
        edge = to_edge_transform_and_lower(exported, partitioner=partitioners, generate_etrecord=True)
        delegation = _delegation_record(edge.exported_program())
        stage.name = "to_executorch"
        program = edge.to_executorch()
        stage.name = "writing artifacts"
        (out / PTE_NAME).write_bytes(program.buffer)
        program.get_etrecord().save(str(out / ETRECORD_NAME))
        torch.save(inputs, out / INPUTS_NAME)
        torch.save(reference, out / REFERENCE_NAME)
    return delegation


# torch sets its "torch.__trace" logger to DEBUG: hundreds of records (FX graphs) per export, which pytest's
# log capture then prints under every failing test that exported. They are kept from propagating during an
# export, and the last of them go into an ExportError's detail (the test's export-error.log).
_TORCH_TRACE = "torch.__trace"
_EXECUTORCH_SERDE = "executorch.exir.serde.export_serialize"
_TRACE_RECORDS = 200


class _Keep(logging.Handler):
    def __init__(self, records: "collections.deque[str]") -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        """Never reached: the filter ``take`` keeps every record and stops it before the handlers. The handler
        is attached only because torch logs its trace records while the logger has one."""

    def take(self, record: logging.LogRecord) -> bool:
        """The logger's filter: keep the record for the error's detail and hand it to the logger's other own
        handlers (torch's trace file when TORCH_TRACE is set; not pytest's capture handler), then return False
        so that it goes no further (a CI run once printed these records under a later test although
        propagate had been set False)."""
        try:
            message = record.getMessage()
            if message.strip():  # torch logs many empty trace records: they would crowd out the telling ones
                self.records.append(f"{record.levelname} {record.name}: {message}")
        except Exception:  # a record that cannot format itself is not worth failing an export over
            pass
        for handler in logging.getLogger(_TORCH_TRACE).handlers:
            if handler is not self and not _is_pytests(handler) and record.levelno >= handler.level:
                handler.handle(record)
        return False


def _is_pytests(handler: logging.Handler) -> bool:
    """pytest's log capture handler: pytest 9.2 attaches it to every non-propagating logger at each test
    phase, torch.__trace included, so it is one of that logger's handlers but never torch's trace file."""
    return type(handler).__module__.split(".")[0] == "_pytest"


def _trace_log(records: "collections.deque[str]") -> str:
    if not records:
        return ""
    return f"\n--- the last {len(records)} records of torch's {_TORCH_TRACE} log ---\n" + "\n".join(records)


def _where_in_model(exc: BaseException, model: Model) -> str:
    """The innermost line of the model's own code in the traceback (any module of its folder or package):
    where its author should look."""
    return where_in_author_code(exc, model.source_path.parent if model.source_path else None)


def _quantize_8da4w(eager):  # noqa: ANN001,ANN202 - torch types
    """ExecuTorch's own LLM quantize source transformation, qmode 8da4w (torchao's
    Int8DynamicActivationIntxWeightConfig, int4 weights in groups), as its LLM export applies it: so what is gated
    is what ships. HQQ's scale search is left out: it changes the weights' values, not the graph."""
    from executorch.examples.models.llama.source_transformation.quantize import quantize
    from torchao.utils import unwrap_tensor_subclass

    # Plain tensors and parametrizations instead of torchao's tensor subclasses, as ExecuTorch's other torchao
    # modes do: torch.export then traces the (de)quantize ops, and the program's weights hash as tensors.
    return unwrap_tensor_subclass(quantize(eager, "8da4w", group_size=GROUP_SIZE_8DA4W, quantize_with_hqq=False))


def _quantize(
    recipe: Recipe,
    exported,
    inputs: tuple,
    calibration: list[tuple] | None,  # noqa: ANN001,ANN202
    dynamic_shapes: Any = None,
):
    """PT2E quantisation of the stage-1 program. Static mode observes activation ranges on the calibration
    samples the cache key was computed from; dynamic mode needs one pass only."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=recipe.quant == "dynamic")
    quantizer = XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(exported.module(), quantizer)
    with torch.no_grad():
        for sample in calibration or [inputs]:
            prepared(*sample)
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        return torch.export.export(converted, inputs, dynamic_shapes=dynamic_shapes)


def _delegation_record(program) -> dict[str, Any]:  # noqa: ANN001
    """Node-level delegation facts of a lowered ``ExportedProgram`` from executorch.devtools.backend_debug, minus
    getitem plumbing, and its graph nodes with the weights each reads (graph_nodes)."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(program.graph_module)
    table = info.get_operator_delegation_dataframe()
    ops = []
    for row in table.to_dict("records"):
        if row["op_type"] in ("Total", "getitem"):
            continue
        ops.append(
            {
                "op_type": row["op_type"],
                "delegated": int(row["occurrences_in_delegated_graphs"]),
                "non_delegated": int(row["occurrences_in_non_delegated_graphs"]),
            }
        )
    return {
        "delegated_nodes": sum(op["delegated"] for op in ops),
        "non_delegated_nodes": sum(op["non_delegated"] for op in ops),
        "delegated_subgraphs": int(info.num_delegated_subgraphs),
        "ops": ops,
        # node by node, so the gate can pair two programs' nodes by name (gate/structure.py)
        "nodes": graph_nodes(program),
    }
