"""What one runner process calls: a method, and the inputs of each timed and warmup call.

A classifier is one call repeated; a language model is not. Its decode steps each take the next position and read
the KV cache that the prefill and the steps before them filled, inside the program's mutable buffers, so they must
run in order in one process, after a prefill. A CallPlan says that: the warmup calls (a prefill that fills the
cache) and the timed calls (decode steps at successive positions), each list cycled when there are more runs than
calls, and the methods they call (``forward``, or a program's ``prefill`` and ``decode`` methods).

It travels to every target in one file (``save``/``load``): the host worker reads it; the native runner gets its
calls as tensor files and flags (``native_calls``). The export's inputs file (one call of ``forward``) reads as
a plan of one call, so every program runs the same way.

The host worker loads this module by its path, without the package (its start is paid by every measurement), so
nothing of pytest_sme2 is imported here but where an error is raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _usage_error(message: str) -> Exception:
    from pytest_sme2.errors import UsageError

    return UsageError(message)


def _runner_error(message: str) -> Exception:
    from pytest_sme2.errors import RunnerError

    return RunnerError(message)


PLAN_FORMAT = "pytest-sme2 call plan"
PLAN_VERSION = 1
PLAN_FILE = "calls.pt"
WARMUP_INPUTS_FILE = "warmup_inputs.bin"


def _flat(call: Any) -> tuple[Any, ...]:
    """One call's inputs as the program takes them: the leaves of nested tuples, lists and dicts, in order."""
    from torch.utils._pytree import tree_leaves

    return tuple(tree_leaves(tuple(call)))


@dataclass(frozen=True)
class CallPlan:
    """The calls of one runner process. ``warmup_calls`` None: the warmup runs make the timed calls."""

    calls: tuple[tuple[Any, ...], ...]
    method: str = "forward"
    warmup_calls: tuple[tuple[Any, ...], ...] | None = None
    warmup_method: str | None = None

    def __post_init__(self) -> None:
        # A program's method takes its inputs flat, in the order torch.export flattens the example inputs: an LSTM's
        # (x, (h0, c0)) is three inputs x, h0, c0 (a nested call reached the native runner's tensor file as a tuple
        # and failed there with "'tuple' object has no attribute 'detach'")
        for name in ("calls", "warmup_calls"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(_flat(call) for call in getattr(self, name)))
        for name in ("method", "warmup_method"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.isidentifier()):
                raise _usage_error(
                    f"{name}={value!r} is not a method name: use the name the program's method was "
                    "exported under (e.g. 'forward', 'prefill', 'decode')"
                )
        for name, calls in (("calls", self.calls), ("warmup_calls", self.warmup_calls)):
            if calls is None:
                continue
            if not calls:
                raise _usage_error(f"a call plan's {name} is empty: give at least one call's inputs")
            sizes = {len(call) for call in calls}
            if len(sizes) > 1:
                raise _usage_error(
                    f"a call plan's {name} take different numbers of inputs ({sorted(sizes)}): every "
                    "call of one method takes the same inputs"
                )

    @property
    def warmup(self) -> tuple[tuple[Any, ...], ...]:
        return self.calls if self.warmup_calls is None else self.warmup_calls

    @property
    def warmup_method_name(self) -> str:
        return self.warmup_method or self.method

    @property
    def is_single_call(self) -> bool:
        """One call of forward, warmed up with itself: what a runner given a plain inputs file does."""
        return (
            len(self.calls) == 1
            and self.warmup_calls is None
            and self.method == "forward"
            and self.warmup_method in (None, "forward")
        )

    def save(self, path: Path) -> Path:
        import torch

        torch.save(
            {
                "format": PLAN_FORMAT,
                "version": PLAN_VERSION,
                "method": self.method,
                "calls": [list(c) for c in self.calls],
                "warmup_method": self.warmup_method,
                "warmup_calls": None if self.warmup_calls is None else [list(c) for c in self.warmup_calls],
            },
            path,
        )
        return path


def load_plan(path: Path) -> CallPlan:
    """The plan in ``path``: a saved CallPlan, or an inputs file of one call (a tuple or list of tensors)."""
    import torch

    try:
        data = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a broken inputs file
        raise _runner_error(f"cannot read the inputs file {path}: {type(exc).__name__}: {exc}") from None
    if isinstance(data, (list, tuple)):
        return CallPlan(calls=(tuple(data),))
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise _runner_error(f"{path} is neither an inputs file (a tuple of tensors) nor a pytest-sme2 call plan")
    if data.get("version") != PLAN_VERSION:
        raise _runner_error(
            f"{path} is a call plan of version {data.get('version')!r}; this pytest-sme2 reads version "
            f"{PLAN_VERSION}: write it again with this version"
        )
    warmup = data.get("warmup_calls")
    return CallPlan(
        calls=tuple(tuple(c) for c in data["calls"]),
        method=data["method"],
        warmup_calls=None if warmup is None else tuple(tuple(c) for c in warmup),
        warmup_method=data.get("warmup_method"),
    )


@dataclass(frozen=True)
class NativeCalls:
    """A plan as the native runner takes it: tensor files, and the flags that split and name the calls (empty for
    a single call of forward, which any ExecuTorch runner reads). The warmup file's flag is the caller's to add
    (--warmup_inputs_path), with the file's path where the runner runs."""

    inputs: Path
    warmup_inputs: Path | None
    flags: tuple[str, ...]


def native_calls(plan_path: Path, inputs_file: Path) -> NativeCalls:
    """Write the plan in ``plan_path`` as the native runner's tensor files: the timed calls to ``inputs_file``,
    the warmup calls (if the plan has its own) beside it."""
    from pytest_sme2.run.native.tensorfile import write_tensors

    plan = load_plan(plan_path)

    def arrays(calls: tuple[tuple[Any, ...], ...]) -> list:
        return [t.detach().contiguous().numpy() for call in calls for t in call]

    write_tensors(inputs_file, arrays(plan.calls))
    if plan.is_single_call:
        return NativeCalls(inputs_file, None, ())
    warmup = None
    if plan.warmup_calls is not None:
        warmup = write_tensors(inputs_file.with_name(WARMUP_INPUTS_FILE), arrays(plan.warmup_calls))
    return NativeCalls(
        inputs_file,
        warmup,
        (
            f"--inputs_per_call={len(plan.calls[0])}",
            f"--method={plan.method}",
            f"--warmup_method={plan.warmup_method_name}",
        ),
    )
