"""The llm_profile fixture as an LLM engineer uses it: on a .pte from ExecuTorch's own LLM export as it ships for
XNNPACK (its custom SDPA and KV-cache ops, several methods: forward plus its metadata methods, a dynamic number of
tokens), on the emulated target, whose counted runs make the gate exact, with each phase gated against its own
baseline; a changed prompt length is named as that, not as a missing baseline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

PARAMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "multiple_of": 32,
          "norm_eps": 1e-5, "rope_theta": 10000.0}


@pytest.fixture(scope="module")
def executorch_llm_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ExecuTorch's export_llama for XNNPACK with a KV cache, a dynamic shape and its LLM custom ops (their kernels
    reach the emulated runner through the kernel kit: run/native/kernel_kit.py)."""
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    folder = tmp_path_factory.mktemp("executorch-llm")
    (folder / "params.json").write_text(json.dumps(PARAMS))
    config = LlmConfig()
    config.base.params = str(folder / "params.json")
    config.model.use_kv_cache = True
    config.model.use_sdpa_with_kv_cache = True
    config.model.enable_dynamic_shape = True
    config.export.max_seq_length = config.export.max_context_length = 64
    config.export.output_dir = str(folder)
    config.export.output_name = str(folder / "llama.pte")  # a path of its own: a bare name lands in the cwd
    config.backend.xnnpack.enabled = True
    export_llama(config)
    return folder / "llama.pte"


def test_llm_profile_of_executorch_llm_export_gated_per_phase(pytester: pytest.Pytester, shared_export_cache: Path,
                                                              executorch_llm_pte: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS")  # the gate is what this test is about (conftest turns it off inside)
    pytester.makeini(textwrap.dedent(f"""
        [pytest]
        sme2_target = emulated
        sme2_cache_dir = {shared_export_cache}
        filterwarnings = ignore
        """))
    # test_my_llama: a name no module of this suite has (pytester collects it in this process)
    pytester.makepyfile(test_my_llama=f"""
        import pytest

        @pytest.mark.sme2
        def test_llama(runner, llm_profile):
            phases = llm_profile({str(executorch_llm_pte)!r}, runner(), prefill=16, decode=4)
            assert phases.decode.runs == 4  # one counted run per decode step
            # ExecuTorch's own attention kernel, one per layer, and its KV-cache write, as data movement
            ops = phases.decode.portable_ops.set_index("kind")
            assert ops.loc["llama::custom_sdpa", "count"] == 2
            assert ops.loc["llama::update_cache", "category"] == "DATA_MOVEMENT"
            print("RATES", phases)
        """)
    recorded = pytester.runpytest("-m", "sme2", "--sme2-update-baselines", "-s")
    recorded.assert_outcomes(passed=1)
    baselines = list((pytester.path / "baselines").rglob("*.json"))
    assert len(baselines) == 1
    labels = set(json.loads(baselines[0].read_text())["profiles"])
    assert labels == {"llama external [emulated sme2=auto threads=1 prefill P=16]",
                      "llama external [emulated sme2=auto threads=1 decode D=4 after P=16]"}
    checked = pytester.runpytest("-m", "sme2", "-s")
    checked.assert_outcomes(passed=1)
    assert any("RATES" in line and "instructions per token" in line for line in checked.outlines)
    assert any("1 baseline file(s)" in line and " 0 regression(s)" in line and " 0 missing" in line
               for line in checked.outlines)
    # A longer prompt: the gate names the change of the test's settings, not just a missing baseline.
    (pytester.path / "test_my_llama.py").write_text(
        (pytester.path / "test_my_llama.py").read_text().replace("prefill=16", "prefill=12"))
    changed = pytester.runpytest("-m", "sme2")
    changed.assert_outcomes(failed=1)
    text = "\n".join(changed.outlines)
    assert "no baseline for llama external [emulated sme2=auto threads=1 prefill P=12] (this test's settings " \
           "changed since the baseline was recorded: P=16 -> P=12" in text
    assert "P=16 -> P=12" in text and "D=4 after P=12]" in text
