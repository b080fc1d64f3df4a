"""Child process that runs programs with the ExecuTorch Python binding.

Started by HostTarget; reads one JSON request per line on stdin and answers
one JSON line on the file descriptor given as argv[1], preceded, when the
request asks for ``progress``, by ``{"progress": i, "of": n}`` lines (after a
timed run, at most twice a second, and after the last). Every line echoes the
request's ``id``, so the parent can never take one request's answer for
another's. Everything the runtime
prints (stdout and stderr) goes to the log the parent gave us, so it never
corrupts the protocol. Living in its own process means a runtime crash costs
one test, not the pytest session, and the thread pool (process-global in
ExecuTorch) can be reset between requests.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

PROGRESS_INTERVAL_NS = 500_000_000  # at most one progress line per half second


def runtime_binding() -> Any:
    """ExecuTorch's Python binding (``portable_lib``), imported without running ``executorch.exir``'s package body.

    The binding's module needs one small module of ``executorch.exir`` (``_warnings``, for a warning class),
    but importing it runs ``executorch/exir/__init__.py``, which imports the whole exporter (torch._dynamo,
    torch.export passes): 3.3-3.9 s of a worker's 4.6-5.3 s start, paid by every fresh worker a measurement
    starts. This process only loads and runs programs, so it registers the package without its
    body; its submodules still import on demand. Not done where ``executorch.exir`` is imported already.
    """
    import importlib.util

    if "executorch.exir" not in sys.modules:
        spec = importlib.util.find_spec("executorch.exir")
        if spec is not None and spec.submodule_search_locations is not None:
            sys.modules["executorch.exir"] = importlib.util.module_from_spec(spec)
    from executorch.extension.pybindings import portable_lib

    return portable_lib


def _call_plan_module() -> Any:
    """run/call_plan.py, loaded by its path: this worker runs without the package (its start is paid by every
    measurement), and that module imports nothing of it but where it raises."""
    import importlib.util

    name = "_sme2_worker_call_plan"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "call_plan.py"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"host worker: {path} is not a loadable Python module; reinstall pytest-sme2")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses looks the module up while the class is made
        spec.loader.exec_module(module)
    return sys.modules[name]


def _load_kernel_libraries(paths: list[str], state: dict[str, Any]) -> None:
    """Register the kernels of operators the binding lacks (kernel_libraries.py), once per worker: each library
    registers its ExecuTorch kernels in the runtime the binding shares, and its ops with torch, when loaded."""
    import torch

    loaded = state.setdefault("kernel_libraries", set())
    for path in paths:
        if path not in loaded:
            torch.ops.load_library(path)
            loaded.add(path)


def _run(
    request: dict[str, Any], state: dict[str, Any], progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """One request: load the program, warm up, time the runs (each after a reference run when asked), write the
    ETDumps and the last outputs; the answer's fields, or why not."""
    import torch

    portable_lib = runtime_binding()

    threads = int(request["threads"])
    if state.get("threads") != threads:
        # Must happen before a program is loaded; safe here because no method is running.
        portable_lib._unsafe_reset_threadpool(threads)
        state["threads"] = threads
    out_dir = request["out_dir"]
    _load_kernel_libraries(request.get("kernel_libraries") or [], state)
    module = portable_lib._load_for_executorch(
        request["pte"], enable_etdump=bool(request["etdump"]), debug_buffer_size=0
    )
    try:
        module.method_names()  # forces the program to load and verify now
    except RuntimeError as exc:
        return {"ok": False, "kind": "program", "error": f"the runtime could not load {request['pte']}: {exc}"}
    call_plan = _call_plan_module()
    if request.get("inputs"):
        plan = call_plan.load_plan(Path(request["inputs"]))
    else:
        plan = call_plan.CallPlan(calls=(_ones_inputs(module),))
    calls, warmup_calls = plan.calls, plan.warmup
    method, warmup_method = plan.method, plan.warmup_method_name
    if warmup_method != method and int(request["warmup"]) > 0:
        return {"ok": False, "kind": "runtime", "error": _two_methods_error(warmup_method, method)}
    reference = _reference(request.get("reference"), state)
    _warm_up(module, reference, warmup_method, warmup_calls, int(request["warmup"]))
    warmup_etdump = None
    if request["etdump"] and int(request["warmup"]) > 0:
        # Writing resets the trace buffer, so the timed file holds timed runs only.
        warmup_etdump = os.path.join(out_dir, request["warmup_name"])
        module.write_etdump_result_to_file(warmup_etdump)
        if not os.path.exists(warmup_etdump):
            return _no_etdump()
    wall_ms, reference_ms, outputs = _timed_runs(module, reference, method, calls, int(request["runs"]), progress)
    timed_etdump = None
    if request["etdump"]:
        timed_etdump = os.path.join(out_dir, request["timed_name"])
        module.write_etdump_result_to_file(timed_etdump)
        if not os.path.exists(timed_etdump):
            return _no_etdump()
    outputs_path = os.path.join(out_dir, request["outputs_name"])
    torch.save(list(outputs) if outputs is not None else [], outputs_path)
    return {
        "ok": True,
        "wall_ms": wall_ms,
        "warmup_etdump": warmup_etdump,
        "timed_etdump": timed_etdump,
        "outputs": outputs_path,
        "threads": portable_lib._threadpool_get_thread_count(),
        **({"reference_ms": reference_ms} if reference is not None else {}),
    }


def _two_methods_error(warmup_method: str, method: str) -> str:
    """Why warmup runs of one method cannot precede timed runs of another in this binding."""
    return (
        f"the warmup runs call method '{warmup_method}' and the timed runs '{method}': ExecuTorch's Python "
        "binding cannot share a program's memory arenas between methods, so the second would not read the "
        "state (a KV cache) the first wrote; run it on a target with pytest-sme2's native runner (local, "
        "emulated or adb), which shares them"
    )


def _warm_up(module: Any, reference: tuple[Any, tuple] | None, method: str, calls: Any, warmup: int) -> None:
    """The warmup runs, each after a reference run when there is one, cycling through the warmup calls."""
    for i in range(warmup):
        if reference is not None:
            reference[0].run_method("forward", reference[1])
        module.run_method(method, calls[i % len(calls)])


def _timed_runs(
    module: Any,
    reference: tuple[Any, tuple] | None,
    method: str,
    calls: Any,
    runs: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[float], list[float], Any]:
    """The timed runs: each one's wall ms, the reference run's right before it (when there is one), and the last
    run's outputs; progress reported outside the timed region, at most twice a second."""
    wall_ms = []
    reference_ms = []
    outputs = None
    clock = time.perf_counter_ns
    reported = clock()
    for done in range(1, runs + 1):
        if reference is not None:  # right before the timed run, so drift of the machine hits both alike
            start = clock()
            reference[0].run_method("forward", reference[1])
            reference_ms.append((clock() - start) / 1e6)
        call = calls[(done - 1) % len(calls)]
        start = clock()
        outputs = module.run_method(method, call)
        end = clock()
        wall_ms.append((end - start) / 1e6)
        # Outside the timed region, and at most twice a second, so fast models run undisturbed.
        if progress is not None and (end - reported >= PROGRESS_INTERVAL_NS or done == runs):
            progress(done, runs)
            reported = end
    return wall_ms, reference_ms, outputs


def _reference(path: str | None, state: dict[str, Any]) -> tuple[Any, tuple] | None:
    """The reference program (no ETDump) and its all-ones inputs, loaded once per worker and path."""
    if path is None:
        return None
    # Keyed by thread count too: a thread-pool reset may free the pool a loaded XNNPACK runtime points at.
    key = (path, state.get("threads"))
    if state.get("reference_key") != key:
        module = runtime_binding()._load_for_executorch(path, enable_etdump=False, debug_buffer_size=0)
        state["reference_key"], state["reference"] = key, (module, _ones_inputs(module))
    return state["reference"]


def _ones_inputs(module: Any) -> tuple:
    """All-ones inputs from the method's metadata, for programs run without an inputs file."""
    import torch

    meta = module.method_meta("forward")
    return tuple(
        torch.ones(tuple(info.sizes()), dtype=_torch_dtype(info.dtype()))
        for info in (meta.input_tensor_meta(i) for i in range(meta.num_inputs()))
    )


def _torch_dtype(code: int):  # noqa: ANN202 - torch dtype
    import torch

    # executorch ScalarType codes (same numbering as c10::ScalarType).
    table = {
        0: torch.uint8,
        1: torch.int8,
        2: torch.int16,
        3: torch.int32,
        4: torch.int64,
        5: torch.float16,
        6: torch.float32,
        7: torch.float64,
        11: torch.bool,
        15: torch.bfloat16,
    }
    return table[int(code)]


def _no_etdump() -> dict[str, Any]:
    """The answer when the binding wrote no ETDump although asked: executorch 1.4.1's wheel builds its binding
    without the event tracer (it logs "No etdump data found"), 1.5.1's with it. Named, never a profile without one."""
    import executorch.version

    version = executorch.version.__version__.split("+")[0]
    return {
        "ok": False,
        "kind": "runtime",
        "error": (
            f"executorch {version}'s Python binding wrote no ETDump: its wheel's binding is built without "
            "ExecuTorch's event tracer (EXECUTORCH_ENABLE_EVENT_TRACER), so the host target cannot profile a "
            "program with it; executorch 1.5.1's binding has the tracer: `pip install executorch==1.5.1`"
        ),
    }


def main() -> int:
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    state: dict[str, Any] = {}

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            ident = request.get("id")
        except (ValueError, AttributeError) as exc:  # no id to echo: the parent stops us as out of step
            reply.write(json.dumps({"id": None, "ok": False, "kind": "runtime", "error": f"bad request: {exc}"}) + "\n")
            continue

        def progress(done: int, total: int, ident: Any = ident) -> None:
            reply.write(json.dumps({"id": ident, "progress": done, "of": total}) + "\n")

        try:
            answer = _run(request, state, progress if request.get("progress") else None)
        except Exception as exc:  # the runtime raised: report, stay alive
            answer = {
                "ok": False,
                "kind": "runtime",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=-4),
            }
        reply.write(json.dumps({"id": ident, **answer}) + "\n")  # the id the parent waits for: never another's
    return 0


def _exit_now(status: int) -> None:
    """End at once once stdin closed: every answer, ETDump and log line is already written, and tearing the
    interpreter down with torch and the runtime loaded took 1.4 s of each worker's life, time a
    measurement of several fresh processes waited for between them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    _exit_now(main())
