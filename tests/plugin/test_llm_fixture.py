"""The llm_profile fixture as an LLM engineer uses it: on a .pte from ExecuTorch's own LLM export as it ships for
XNNPACK (its custom SDPA and KV-cache ops, several methods: forward plus its metadata methods, a dynamic number of
tokens), on the emulated target, whose counted runs make the gate exact, with each phase gated against its own
baseline; a changed prompt length is named as that, not as a missing baseline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers_versions import needs_binding_etdump

PARAMS = {
    "dim": 64,
    "n_layers": 1,
    "n_heads": 4,
    "n_kv_heads": 2,
    "vocab_size": 256,
    "multiple_of": 32,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
}


CONFIG = {
    "model.use_kv_cache": True,
    "model.use_sdpa_with_kv_cache": True,
    "model.enable_dynamic_shape": True,
    "export.max_seq_length": 64,
    "export.max_context_length": 64,
    "backend.xnnpack.enabled": True,
}


@needs_binding_etdump
def test_executorch_llm_export_gated_per_phase_with_changes_named(
    pytester: pytest.Pytester, shared_export_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """export_llm runs ExecuTorch's export_llama (custom SDPA and KV-cache ops, dynamic shape) into the export
    cache with its graph nodes; llm_profile gates each phase. Then two changes a person makes, each named in the
    first line: a longer prompt (the test's settings), and a second transformer layer (the model). One layer to start
    with: two exports of one and two layers cost less than of two and three (issue 56: make test)."""
    monkeypatch.delenv("PYTEST_ADDOPTS")  # the gate is what this test is about (conftest turns it off inside)
    params = pytester.path / "params.json"
    params.write_text(json.dumps(PARAMS))
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        sme2_target = emulated
        sme2_cache_dir = {shared_export_cache}
        filterwarnings = ignore
        """)
    )
    config = {"base.params": str(params), **CONFIG}
    # test_my_llama: a name no module of this suite has (pytester collects it in this process)
    pytester.makepyfile(
        test_my_llama=f"""
        import json
        import pytest

        @pytest.mark.sme2
        def test_llama(export_llm, runner, llm_profile):
            pte = export_llm({config!r}, name="llama")
            phases = llm_profile(pte, runner(), prefill=16, decode=4)
            assert phases.decode.runs == 4  # one counted run per decode step
            # ExecuTorch's own attention kernel, one per layer of the params file, and its KV-cache write, as data
            # movement
            ops = phases.decode.portable_ops.set_index("kind")
            layers = json.loads(open({str(params)!r}).read())["n_layers"]
            assert ops.loc["llama::custom_sdpa", "count"] == layers
            assert ops.loc["llama::update_cache", "category"] == "DATA_MOVEMENT"
            print("RATES", phases)
        """
    )
    recorded = pytester.runpytest("-m", "sme2", "--sme2-update-baselines", "-s")
    recorded.assert_outcomes(passed=1)
    baselines = list((pytester.path / "baselines").rglob("*.json"))
    assert len(baselines) == 1
    labels = set(json.loads(baselines[0].read_text())["profiles"])
    assert labels == {
        "llama fp32-xnnpack [emulated sme2=auto threads=1 prefill P=16]",
        "llama fp32-xnnpack [emulated sme2=auto threads=1 decode D=4 after P=16]",
    }
    checked = pytester.runpytest("-m", "sme2", "-s")
    checked.assert_outcomes(passed=1)
    assert any("RATES" in line and "instructions per token" in line for line in checked.outlines)
    assert any(
        "1 baseline file(s)" in line and " 0 regression(s)" in line and " 0 missing" in line
        for line in checked.outlines
    )
    test_file = pytester.path / "test_my_llama.py"
    original = test_file.read_text()
    # A longer prompt: the gate names the change of the test's settings, not just a missing baseline.
    test_file.write_text(original.replace("prefill=16", "prefill=12"))
    changed = pytester.runpytest("-m", "sme2")
    changed.assert_outcomes(failed=1)
    text = "\n".join(changed.outlines)
    assert (
        "no baseline for llama fp32-xnnpack [emulated sme2=auto threads=1 prefill P=12] (this test's settings "
        "changed since the baseline was recorded: P=16 -> P=12" in text
    )
    # A second transformer layer appended to ExecuTorch's Llama: the headline is that layer, by its module name.
    test_file.write_text(original)
    params.write_text(json.dumps({**PARAMS, "n_layers": 2}))
    grown = pytester.runpytest("-m", "sme2")
    grown.assert_outcomes(failed=1)
    # (two alike layers: which is new the graph cannot tell, and the headline says so and names the new name)
    firsts = [
        line
        for line in grown.outlines
        if "layers: 1 -> 2 blocks (1 added among layers.0 to .1, which are alike: the graph cannot tell which; "
        "new name layers.1)" in line
    ]
    assert firsts, "\n".join(grown.outlines[-60:])
    # issue 65: nothing of layer 0 or around it is gone because positions shifted (a 2 -> 3 layer SmolLM2 listed
    # its GEMMs "@25" and _local_scalar_dense and add operators as gone and new)
    grown_text = "\n".join(grown.outlines)
    assert "are gone" not in grown_text and "gone: " not in grown_text, grown_text[-6000:]
