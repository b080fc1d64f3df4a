"""A language model's two phases, each a Profile: a prefill of P tokens, then D decode steps over the KV cache the
prefill filled, in one runner process; with the figures LLM engineers quote, per token.

The calls follow ExecuTorch's LLM calling convention, which its llama runner uses: ``method(tokens, input_pos)``,
tokens a ``[1, n]`` integer tensor and ``input_pos`` a ``[1]`` tensor holding the position of the first of them; a
program exported with a dynamic number of tokens serves both phases with one method, a program with ``prefill``
and ``decode`` methods (or any names) with two. The token values come from the model's example tokens, cycled:
the graph's cost does not depend on which tokens they are.

- prefill: each timed run is the prompt at position 0 (it rewrites positions 0..P-1 of the cache and attends to
  them only), so every run is the same prefill;
- decode: the warmup runs make the prefill (so the cache holds the prompt), then timed run k is one token at
  position P + k (k = 0..D-1, cycled when more runs are asked), each reading the cache the prefill and the steps
  before it filled.

Per token (TokenRates): on hardware, tokens per second with an interval (prefill P tokens per run, decode one per
step, as llama-bench's pp/tg); on the emulated target exact instructions per token (emulated time is not time);
with a device model, modelled tokens per second, labelled as modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_sme2.errors import UsageError
from pytest_sme2.run.call_plan import CallPlan

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_sme2.export.export import ExportedModel
    from pytest_sme2.measure.runner import Runner
    from pytest_sme2.profile.profile import Profile
    from pytest_sme2.profile.stats import SampleStats

# Longest sequence asked for: no ExecuTorch LLM program plans a KV cache longer than this (Llama 3's 128k context).
MAX_TOKENS = 131_072


@dataclass(frozen=True)
class LlmSequence:
    """P prompt tokens, then D decode steps, and the methods each phase calls."""

    prefill: int
    decode: int
    prefill_method: str = "forward"
    decode_method: str = "forward"
    # Tokens per prefill call; None: the whole prompt in one call. A program exported with static shapes takes a
    # fixed number (ExecuTorch's KV-cache export without a dynamic shape takes one), and ExecuTorch's llama runner
    # prefills it chunk by chunk: each timed prefill run is then one chunk, at its position.
    prefill_chunk: int | None = None

    def __post_init__(self) -> None:
        for name, low in (("prefill", 1), ("decode", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
                raise UsageError(
                    f"{name}={value!r} is invalid: {name} is a number of tokens, an integer from {low} "
                    f"to {MAX_TOKENS}"
                )
        chunk = self.prefill_chunk
        if chunk is not None and (
            isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk or self.prefill % chunk
        ):
            raise UsageError(
                f"prefill_chunk={chunk!r} is invalid: it is the tokens of each prefill call, an integer "
                f"that divides prefill={self.prefill} (the program's fixed number of tokens per call)"
            )

    @property
    def chunk(self) -> int:
        """Tokens per prefill call."""
        return self.prefill_chunk or self.prefill

    @property
    def chunks(self) -> int:
        """Prefill calls per prompt."""
        return self.prefill // self.chunk

    @property
    def label(self) -> tuple[str, str]:
        """The two phases' names in variant labels (each phase has its own baseline)."""
        chunked = f" in calls of {self.chunk}" if self.chunks > 1 else ""
        return f"prefill P={self.prefill}{chunked}", f"decode D={self.decode} after P={self.prefill}"

    def plans(self, example_inputs: tuple[Any, ...]) -> tuple[CallPlan, CallPlan]:
        """The prefill's and the decode's call plans, built on the model's example ``(tokens, input_pos)``."""
        import torch

        tokens = _example_tokens(example_inputs)
        flat = tokens.reshape(-1)

        def ids(count: int, start: int = 0) -> torch.Tensor:
            index = torch.arange(start, start + count) % flat.numel()
            return flat[index].reshape(1, count).to(tokens.dtype)

        def position(value: int) -> torch.Tensor:
            return torch.tensor([value], dtype=example_inputs[1].dtype)

        prompt = tuple((ids(self.chunk, start), position(start)) for start in range(0, self.prefill, self.chunk))
        steps = tuple((ids(1, self.prefill + k), position(self.prefill + k)) for k in range(self.decode))
        prefill = CallPlan(calls=prompt, method=self.prefill_method)
        decode = CallPlan(
            calls=steps, method=self.decode_method, warmup_calls=prompt, warmup_method=self.prefill_method
        )
        return prefill, decode


# Token ids of a program given as a .pte path, which has no example inputs: small ids every vocabulary has.
PATH_TOKENS = 32


def example_calls(pte: "ExportedModel | str | Path") -> tuple[Any, ...]:
    """``(tokens, input_pos)`` to build the calls on: the export's example inputs, or for a .pte path (a program
    from ExecuTorch's own LLM export, say) ids 1..32 and position 0 as int64, the dtypes ExecuTorch's llama runner
    passes."""
    import torch

    from pytest_sme2.export.export import ExportedModel

    if isinstance(pte, ExportedModel):
        return tuple(torch.load(pte.inputs_path, weights_only=True))
    return (torch.arange(1, PATH_TOKENS + 1, dtype=torch.long).reshape(1, -1), torch.tensor([0], dtype=torch.long))


def _example_tokens(example_inputs: tuple[Any, ...]) -> Any:
    import torch

    if (
        len(example_inputs) != 2
        or not all(isinstance(x, torch.Tensor) for x in example_inputs)
        or example_inputs[0].dim() != 2
        or example_inputs[0].is_floating_point()
        or example_inputs[1].numel() != 1
    ):
        shapes = ", ".join(
            f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__ for x in example_inputs
        )
        raise UsageError(
            f"llm_profile() calls the program as ExecuTorch's LLM runner does, method(tokens [1, n] "
            f"integers, input_pos [1]); this model's example inputs are ({shapes}): give the model "
            "get_example_inputs() returning (tokens, input_pos)"
        )
    return example_inputs[0]


@dataclass(frozen=True)
class TokenRates:
    """Per-token figures of one phase's Profile (``tokens`` per timed run: P for prefill, 1 for decode)."""

    profile: "Profile"
    tokens: int

    @property
    def tokens_per_s(self) -> tuple[float, float, float]:
        """(value, low, high): tokens per second from the phase's time per run and its 95% interval. Measured
        time only: on the emulated target a timing skip, as every latency there."""
        lat = self.profile.latency  # raises the emulated-timing skip where time is not time
        per_run = lat.median / 1e3
        low_ms, high_ms = lat.median_ci.low, lat.median_ci.high
        return (
            self.tokens / per_run,
            self.tokens / (high_ms / 1e3) if high_ms > 0 else math.nan,
            self.tokens / (low_ms / 1e3) if low_ms > 0 else math.inf,
        )

    @property
    def instructions_per_token(self) -> float | None:
        """Counted instructions per token (emulated target): the phase's runs' instructions over their tokens,
        exact; None where nothing counted them."""
        counted = self.profile.instructions
        if counted is None:
            return None
        values = counted.instructions.execute_values
        return float(values.sum()) / (self.tokens * len(values))

    def modelled_tokens_per_s(self, device: "str | Path" = "apple-m4") -> float:
        """Tokens per second on a device model: a model, not a measurement (see Profile.modelled)."""
        return self.tokens / (self.profile.modelled(device).e2e_ms / 1e3)

    def text(self) -> str:
        """What the phase's figures are, in words that say which are measured, counted or modelled."""
        if self.profile.emulated:
            per_token = self.instructions_per_token
            return (
                f"{per_token:,.0f} instructions per token (counted under emulation; emulated time is not time)"
                if per_token is not None
                else "emulated, not counted: no per-token figure"
            )
        value, low, high = self.tokens_per_s
        return f"{value:,.1f} tokens/s [95% CI {low:,.1f}-{high:,.1f}]"


@dataclass(frozen=True)
class TimeToFirstToken:
    """The prompt's time in milliseconds, a sample of runs whose repr names its unit; every statistic of the
    sample (``median``, ``median_ci``, ``n``, ...) reads through, in ms."""

    ms: "SampleStats"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ms, name)

    def __repr__(self) -> str:
        ci = self.ms.median_ci
        return (
            f"time to first token {self.ms.median:,.3f} ms median [95% CI {ci.low:,.3f}-{ci.high:,.3f} ms] "
            f"over {self.ms.n} prompts (measured)"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class LlmProfile:
    """The two phases of one variant: ``prefill`` and ``decode`` Profiles, and their per-token figures."""

    sequence: LlmSequence
    prefill: "Profile"
    decode: "Profile"

    @property
    def profiles(self) -> tuple["Profile", "Profile"]:
        """Both phases' Profiles, prefill first: what the test gets attached and the result cache answers one by one."""
        return (self.prefill, self.decode)

    @property
    def prefill_rates(self) -> TokenRates:
        return TokenRates(self.prefill, self.sequence.chunk)

    @property
    def decode_rates(self) -> TokenRates:
        return TokenRates(self.decode, 1)

    @property
    def time_to_first_token(self) -> TimeToFirstToken:
        """The prompt's time in ms, which yields the first token's logits: one prefill run, or the sum of a cycle
        of chunks for a prompt in chunks. Measured time only: on the emulated target a timing skip."""
        from pytest_sme2.profile import stats

        latency = self.prefill.latency  # raises the emulated-timing skip where time is not time
        chunks = self.sequence.chunks
        if chunks == 1:
            return TimeToFirstToken(latency)
        runs = self.prefill.e2e_ms[: len(self.prefill.e2e_ms) // chunks * chunks]
        return TimeToFirstToken(stats.SampleStats.of(runs.reshape(-1, chunks).sum(axis=1)))

    def __repr__(self) -> str:
        variant = self.prefill.label.replace(f" {self.sequence.label[0]}", "")
        return (
            f"LlmProfile({variant}: prefill of {self.sequence.prefill} tokens {self.prefill_rates.text()}; "
            f"decode {self.decode_rates.text()})"
        )

    __str__ = __repr__


def llm_phases(
    pte: "ExportedModel | str | Path", runner: "Runner", sequence: LlmSequence, example_inputs: tuple[Any, ...]
) -> LlmProfile:
    """Profile the prefill and the decode of ``pte`` on ``runner``'s variant, each in its own runner processes."""
    prefill_plan, decode_plan = sequence.plans(example_inputs)
    prefill_label, decode_label = sequence.label
    emulated = runner.session.target.info.emulated

    def whole_cycles(calls: int) -> int:
        """Runs that make every call of a cycle equally often (counted runs repeat exactly: one cycle)."""
        return calls * (1 if emulated else max(1, -(-runner.spec.runs // calls)))

    # A prompt in chunks: whole cycles of them, so each chunk at its position reads the cache the earlier ones
    # filled in the same cycle.
    prefill_spec = runner.spec if sequence.chunks == 1 else replace(runner.spec, runs=whole_cycles(sequence.chunks))
    prefill = _phase(replace(runner, spec=prefill_spec, plan=prefill_plan, phase=prefill_label), pte, sequence)
    # Every decode step once per cycle, after warmup runs that end with the whole prompt in the cache.
    warmup = sequence.chunks * max(1, -(-runner.spec.warmup // sequence.chunks))
    spec = replace(runner.spec, runs=whole_cycles(sequence.decode), warmup=warmup)
    decode = _phase(replace(runner, spec=spec, plan=decode_plan, phase=decode_label), pte, sequence)
    # What the reports show per token (report/table.py) and summary.json keeps.
    prefill.metadata["llm"] = {"phase": "prefill", "tokens_per_run": sequence.chunk, "prefill": sequence.prefill}
    decode.metadata["llm"] = {
        "phase": "decode",
        "tokens_per_run": 1,
        "prefill": sequence.prefill,
        "decode": sequence.decode,
    }
    return LlmProfile(sequence, prefill, decode)


# What ExecuTorch's runtime logs when a call's tokens exceed what the program planned for them: an input larger
# than its bound, or a KV-cache position past its end.
_TOO_LONG = ("Attempted to resize", "Check failed", "out of bounds", "Error resizing tensor")


def _phase(runner: "Runner", pte: "ExportedModel | str | Path", sequence: LlmSequence) -> "Profile":
    """One phase's Profile; a runner failure says first which phase failed and, where the runtime's log shows a
    call too long for the program, that P + D must fit its context (the runner's own message follows)."""
    from pytest_sme2.errors import RunnerError

    try:
        return runner.profile(pte)
    except RunnerError as exc:
        message = str(exc)
        if not any(sign in message for sign in _TOO_LONG):
            raise
        total = sequence.prefill + sequence.decode
        raise type(exc)(
            f"the {runner.phase} phase of the language model failed: the runtime refused a call as too "
            f"long for the program. Prefill and decode together are {total} tokens (P={sequence.prefill}"
            f", D={sequence.decode}) and each prefill call {sequence.chunk}: the program takes at most its "
            "context length (its KV cache; ExecuTorch's LLM export: max_context_length) and, with static "
            "shapes, a fixed number of tokens per call (prefill_chunk). What the runner said:\n" + message
        ) from None
