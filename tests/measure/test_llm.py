"""A language model's prefill and decode, each a Profile: the calls, and real runs with the KV cache filled.

The references are ExecuTorch's own Llama in PyTorch eager, fed the same prompt and then the same decode tokens
one at a time: its KV cache carries state from call to call exactly as the program's mutable buffers must, so a
decode step run on an unfilled cache gives other logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_llm import eager_sequence, last_output
from helpers_versions import needs_binding_etdump

from pytest_sme2 import Recipe
from pytest_sme2.errors import RunnerError, UsageError
from pytest_sme2.measure.llm import LlmSequence, TokenRates, example_calls, llm_phases
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Sme2Session
from pytest_sme2.report.table import amount, instructions
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets import RunSpec

EXAMPLE = (torch.tensor([[5, 6, 7]]), torch.tensor([0]))


def test_prefill_is_the_prompt_at_position_zero_and_decode_each_next_position() -> None:
    prefill, decode = LlmSequence(prefill=5, decode=3).plans(EXAMPLE)
    tokens, pos = prefill.calls[0]
    assert tokens.tolist() == [[5, 6, 7, 5, 6]] and pos.tolist() == [0] and prefill.warmup_calls is None
    assert [int(c[1]) for c in decode.calls] == [5, 6, 7]  # positions after the prompt
    assert [c[0].tolist() for c in decode.calls] == [[[7]], [[5]], [[6]]]  # the example tokens, cycled
    assert decode.warmup[0][0].tolist() == tokens.tolist()  # the warmup is the prefill: it fills the cache


def test_phase_methods_are_those_named() -> None:
    prefill, decode = LlmSequence(4, 2, prefill_method="prefill", decode_method="decode").plans(EXAMPLE)
    assert (prefill.method, decode.method, decode.warmup_method_name) == ("prefill", "decode", "prefill")


@pytest.mark.parametrize(
    "kwargs, says", [(dict(prefill=0, decode=1), "prefill=0"), (dict(prefill=4, decode=True), "decode=True")]
)
def test_a_sequence_that_is_no_number_of_tokens_is_refused(kwargs: dict, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        LlmSequence(**kwargs)


def test_a_model_not_called_as_an_llm_is_told_what_the_calls_are() -> None:
    with pytest.raises(UsageError, match=r"method\(tokens \[1, n\] integers, input_pos \[1\]\)"):
        LlmSequence(4, 2).plans((torch.ones(1, 3, 8, 8),))


def _eager_sequence(session: Sme2Session, model: str, sequence: LlmSequence) -> tuple[torch.Tensor, torch.Tensor]:
    return eager_sequence(session.registry.get(model), sequence)


_last_output = last_output


def _phases(session: Sme2Session, model: str, sequence: LlmSequence, spec: RunSpec):  # noqa: ANN202
    exported = session.export(model, Recipe())
    example = tuple(torch.load(exported.inputs_path, weights_only=True))
    return llm_phases(exported, Runner(session, spec, session.test_dir(f"{model}-llm")), sequence, example)


@pytest.mark.skipif(not emulation_setup.status().ready, reason="emulated target not ready")
def test_emulated_decode_reads_the_cache_the_prefill_filled(bundled_sessions) -> None:  # noqa: ANN001
    session = bundled_sessions("emulated")
    # A prompt longer than the 8 example tokens the program was traced with: its dynamic dimension must survive
    # lowering (reading a symbolic size as an int once specialized it to 8).
    sequence = LlmSequence(prefill=12, decode=4)
    phases = _phases(session, "tiny_llama_portable", sequence, RunSpec(sme2=True, runs=1, warmup=0))
    prefill_ref, last_ref = _eager_sequence(session, "tiny_llama_portable", sequence)
    torch.testing.assert_close(_last_output(phases.prefill), prefill_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(_last_output(phases.decode), last_ref, rtol=1e-4, atol=1e-4)
    # One run per decode step, each counted; the labels keep the phases' baselines apart.
    assert phases.decode.runs == sequence.decode and phases.prefill.runs == 1
    assert phases.prefill.label.endswith("prefill P=12]") and phases.decode.label.endswith("decode D=4 after P=12]")
    steps = phases.decode.instructions.instructions.execute_values
    assert TokenRates(phases.decode, 1).instructions_per_token == pytest.approx(steps.mean())
    prompt = phases.prefill.instructions.instructions.execute_values[0]
    assert TokenRates(phases.prefill, 12).instructions_per_token == pytest.approx(prompt / 12)
    # A token of the prefill costs less than a decode step: the prompt's tokens share each weight read.
    assert prompt / 12 < steps.mean()
    assert "emulated time is not time" in TokenRates(phases.decode, 1).text()
    # The reports' size cell gives the prefill per token too (12 tokens a run), counted.
    cell = amount(phases.prefill.to_dict())
    assert cell.startswith(instructions(prompt)) and f"{instructions(prompt / 12)} instr/token" in cell


@pytest.mark.skipif(not emulation_setup.status().ready, reason="emulated target not ready")
def test_emulated_decode_with_executorch_llm_custom_ops(bundled_sessions) -> None:  # noqa: ANN001
    """ExecuTorch's custom SDPA and KV-cache update kernels from the aarch64 wheel (through the runner's kernel
    kit) on the emulated target, counted: the prefill's and the last decode step's logits are the eager model's."""
    session = bundled_sessions("emulated")
    sequence = LlmSequence(prefill=10, decode=3)
    phases = _phases(session, "tiny_llama", sequence, RunSpec(sme2=True, runs=1, warmup=0))
    prefill_ref, last_ref = _eager_sequence(session, "tiny_llama", sequence)
    torch.testing.assert_close(_last_output(phases.prefill), prefill_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(_last_output(phases.decode), last_ref, rtol=1e-4, atol=1e-4)
    ops = phases.decode.ops
    sdpa = ops[ops["kind"] == "llama::custom_sdpa"]
    assert len(sdpa) == 2 and (sdpa["instructions"] > 0).all()  # one per layer, each counted
    assert phases.decode.instructions is not None


@needs_binding_etdump
def test_host_decode_with_executorch_llm_custom_ops(bundled_sessions) -> None:  # noqa: ANN001
    """ExecuTorch's custom SDPA and KV-cache update on the host target, prefill then decode: the decode's last
    logits are the eager model's after the same prompt and steps; tokens per second are measured figures."""
    session = bundled_sessions("host")
    sequence = LlmSequence(prefill=8, decode=5)
    phases = _phases(session, "tiny_llama", sequence, RunSpec(runs=10, warmup=1))
    _, last_ref = _eager_sequence(session, "tiny_llama", sequence)
    torch.testing.assert_close(_last_output(phases.decode), last_ref, rtol=1e-4, atol=1e-4)
    assert phases.decode.runs == 10  # two cycles of the five steps
    value, low, high = phases.decode_rates.tokens_per_s
    assert low <= value <= high and value == pytest.approx(1e3 / phases.decode.latency.median)
    prefill_value = phases.prefill_rates.tokens_per_s[0]
    assert prefill_value == pytest.approx(8e3 / phases.prefill.latency.median)
    assert amount(phases.prefill.to_dict()).endswith(f", {prefill_value:,.0f} tokens/s")


@pytest.fixture(scope="module")
def prefill_decode_methods_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ExecuTorch's own LLM export of a program with two methods, ``prefill`` and ``decode``, sharing their KV
    cache (its multimethod export with share_mutable_buffers), reference attention so that it runs emulated. One
    layer: its KV cache is what the methods share, and the export (not cached: export_llm refuses several methods)
    takes 21 s against 33 s for two layers (issue 56: make test).

    The weights come from a seeded checkpoint: without one, export_llama builds the model on the meta device and
    to_empty() leaves everything reset_parameters() does not set (the RMSNorm weights, the rope tables, the causal
    mask, the KV cache) as whatever the heap held, so each export had other garbage: mostly all 256 logits inf in
    both ways (a vacuous pass), sometimes finite ones that differ (5.7e36 against inf), whatever qemu ran it."""
    import json

    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import LlmConfig, MethodConfig

    folder = tmp_path_factory.mktemp("two-methods")
    params = {"dim": 64, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "multiple_of": 32}
    (folder / "params.json").write_text(json.dumps(params))
    torch.manual_seed(0)
    model = construct_transformer(
        ModelArgs(max_seq_len=64, max_context_len=64, max_batch_size=1, use_kv_cache=True, **params)
    )
    torch.save(model.state_dict(), folder / "checkpoint.pth")
    config = LlmConfig()
    config.base.params = str(folder / "params.json")
    config.base.checkpoint = str(folder / "checkpoint.pth")
    config.model.use_kv_cache = True
    config.model.enable_dynamic_shape = True
    config.export.max_seq_length = config.export.max_context_length = 64
    config.export.output_name = str(folder / "llama.pte")
    config.backend.xnnpack.enabled = True
    config.multimethod.methods = [MethodConfig("prefill"), MethodConfig("decode")]
    config.multimethod.share_mutable_buffers = True
    export_llama(config)
    return folder / "llama.pte"


@pytest.mark.skipif(not emulation_setup.status().ready, reason="emulated target not ready")
def test_separate_prefill_and_decode_methods_share_the_cache(
    bundled_sessions,  # noqa: ANN001
    prefill_decode_methods_pte: Path,
) -> None:
    """Prefill by the ``prefill`` method, decode by the ``decode`` method, in one process: the decode steps must read
    the cache the other method filled, so their last logits equal those of the same calls all made by ``decode``
    (one method: no sharing needed). A decode that read an unfilled cache would give other logits."""
    session = bundled_sessions("emulated")
    sequence = LlmSequence(prefill=8, decode=3, prefill_method="prefill", decode_method="decode")
    example = example_calls(prefill_decode_methods_pte)
    runner = Runner(session, RunSpec(sme2=True, runs=1, warmup=0), session.test_dir("two-methods"))
    two = llm_phases(prefill_decode_methods_pte, runner, sequence, example)
    one = llm_phases(
        prefill_decode_methods_pte,
        runner,
        LlmSequence(prefill=8, decode=3, prefill_method="decode", decode_method="decode"),
        example,
    )
    torch.testing.assert_close(_last_output(two.decode), _last_output(one.decode), rtol=1e-5, atol=1e-5)
    assert two.decode.label.endswith("decode D=3 after P=8]")


@needs_binding_etdump
def test_the_python_binding_refuses_two_methods_it_cannot_share_a_cache_between(
    bundled_sessions, prefill_decode_methods_pte: Path
) -> None:  # noqa: ANN001
    session = bundled_sessions("host")
    sequence = LlmSequence(prefill=8, decode=2, prefill_method="prefill", decode_method="decode")
    runner = Runner(session, RunSpec(runs=2, warmup=1), session.test_dir("two-methods-host"))
    with pytest.raises(RunnerError, match="cannot share a program's memory arenas between methods"):
        llm_phases(prefill_decode_methods_pte, runner, sequence, example_calls(prefill_decode_methods_pte))


@pytest.mark.skipif(not emulation_setup.status().ready, reason="emulated target not ready")
def test_modelled_tokens_per_second_are_labelled_as_modelled(bundled_sessions) -> None:  # noqa: ANN001
    """With a device model, a phase's counted run priced on it gives tokens per second that the reports call
    modelled, next to the device file and its validation status."""
    from pytest_sme2.report.entries import build_test_entry, modelled_comparison
    from pytest_sme2.report.table import modelled_text, program_title

    session = bundled_sessions("emulated")
    sequence = LlmSequence(prefill=8, decode=2)
    on, off = (
        _phases(session, "tiny_llama_portable", sequence, RunSpec(sme2=sme2, runs=1, warmup=0))
        for sme2 in (True, False)
    )
    compared = modelled_comparison(on.prefill, off.prefill, "apple-m4")
    rates = compared["tokens_per_s"]
    assert rates["on"] == pytest.approx(on.prefill_rates.modelled_tokens_per_s("apple-m4"))
    assert rates["off"] == pytest.approx(off.prefill_rates.modelled_tokens_per_s("apple-m4"))
    sentence = modelled_text(compared)
    assert "a model, not a measurement" in sentence and "Modelled tokens/s: SME2 off" in sentence
    # The reports tell the phases' SME2 on/off comparisons apart (both are "tiny_llama_portable fp32-xnnpack").
    entry = build_test_entry("t", [on.prefill, on.decode, off.prefill, off.decode])
    titles = sorted(program_title(c) for c in entry["comparisons"])
    assert titles == ["tiny_llama_portable fp32-xnnpack, decode", "tiny_llama_portable fp32-xnnpack, prefill"]


def test_a_prompt_in_chunks_is_one_chunk_a_run_at_its_position() -> None:
    prefill, decode = LlmSequence(prefill=4, decode=2, prefill_chunk=2).plans(EXAMPLE)
    assert [(c[0].tolist(), int(c[1])) for c in prefill.calls] == [([[5, 6]], 0), ([[7, 5]], 2)]
    assert len(decode.warmup) == 2 and [int(c[1]) for c in decode.calls] == [4, 5]
    assert LlmSequence(4, 2, prefill_chunk=2).label[0] == "prefill P=4 in calls of 2"
    with pytest.raises(UsageError, match="divides prefill=4"):
        LlmSequence(4, 2, prefill_chunk=3)


STATIC_LLAMA = '''
"""ExecuTorch's Llama exported with static shapes: a KV cache, one token per call (one layer: the calls are what is
checked, and each layer more is seconds of export)."""
import torch
from torch import nn


class Call(nn.Module):
    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer

    def forward(self, tokens, input_pos):
        return self.transformer(tokens, {"input_pos": input_pos})


def get_eager_model():
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, vocab_size=256, multiple_of=32, max_seq_len=32,
                     max_context_len=32, use_kv_cache=True, enable_dynamic_shape=False)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Call(construct_transformer(args).eval()).eval()


def get_example_inputs():
    return (torch.tensor([[3]], dtype=torch.long), torch.tensor([0], dtype=torch.long))
'''


@pytest.mark.skipif(not emulation_setup.status().ready, reason="emulated target not ready")
def test_a_static_shape_program_prefills_in_chunks_of_its_size(bundled_sessions, tmp_path: Path) -> None:  # noqa: ANN001
    """A program that takes one token per call: the prompt in calls of one, each at its position, then decode; the
    last step's logits are the eager model's after the same calls, so each chunk read the ones before it."""
    session = bundled_sessions("emulated")
    (tmp_path / "static_llama.py").write_text(STATIC_LLAMA)
    session.registry.register("static_llama", str(tmp_path / "static_llama.py"))
    sequence = LlmSequence(prefill=4, decode=2, prefill_chunk=1)
    phases = _phases(session, "static_llama", sequence, RunSpec(sme2=True, runs=1, warmup=0))
    model = session.registry.get("static_llama")
    eager = model.get_eager_model()
    prefill_plan, decode_plan = sequence.plans(model.get_example_inputs())
    with torch.no_grad():
        for call in (*prefill_plan.calls, *decode_plan.calls):
            last = eager(*call)
    torch.testing.assert_close(_last_output(phases.decode), last, rtol=1e-4, atol=1e-4)
    assert phases.prefill.runs == 4 and phases.prefill.label.endswith("prefill P=4 in calls of 1]")
    assert phases.prefill_rates.tokens == 1


@needs_binding_etdump
def test_a_prompt_in_chunks_has_its_time_to_first_token_summed_over_a_cycle(
    bundled_sessions,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    session = bundled_sessions("host")
    (tmp_path / "static_llama.py").write_text(STATIC_LLAMA)
    session.registry.register("static_llama", str(tmp_path / "static_llama.py"))
    phases = _phases(
        session, "static_llama", LlmSequence(prefill=4, decode=2, prefill_chunk=1), RunSpec(runs=8, warmup=1)
    )
    assert phases.prefill.runs == 8  # two cycles of the four one-token calls
    cycles = phases.prefill.e2e_ms.reshape(2, 4).sum(axis=1)
    assert phases.time_to_first_token.median == pytest.approx(float(np.median(cycles)))
    assert repr(phases.time_to_first_token).startswith("time to first token ") and " ms median [95% CI " in repr(
        phases.time_to_first_token
    )


@needs_binding_etdump
def test_a_sequence_longer_than_the_context_says_so_first(bundled_sessions) -> None:  # noqa: ANN001
    """tiny_llama_portable's KV cache holds 64 positions: 60 prompt tokens and 10 steps run past it."""
    session = bundled_sessions("host")
    with pytest.raises(RunnerError) as caught:
        _phases(session, "tiny_llama_portable", LlmSequence(prefill=60, decode=10), RunSpec(runs=2, warmup=1))
    first = str(caught.value).splitlines()[0]
    assert first.startswith("the decode D=10 after P=60 phase of the language model failed")
    assert "70 tokens" in first and "context length" in first


def test_the_two_method_program_has_sane_logits(prefill_decode_methods_pte: Path) -> None:
    """The two-method program's weights and buffers are all set (its checkpoint): the host's decode logits are
    finite and of an ordinary size, so the emulated test above compares real numbers, not inf with inf."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(prefill_decode_methods_pte)
    tokens, _ = example_calls(prefill_decode_methods_pte)
    logits = program.load_method("prefill").execute((tokens[:, :8], torch.tensor([0], dtype=torch.long)))[0]
    assert torch.isfinite(logits).all() and logits.abs().max() < 100
