"""ExecuTorch's LLM export as a recipe: its config, its key and its label (the real export_llama run and the gate
on its program: tests/plugin/test_llm_fixture.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.errors import UsageError
from pytest_sme2.export.llm_export import config_key, llm_config, recipe_of


@pytest.fixture
def params(tmp_path: Path) -> Path:
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"dim": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 256}))
    return path


def test_dotted_fields_set_executorch_s_config(params: Path) -> None:
    config = llm_config({"base.params": str(params), "model.use_kv_cache": True, "backend.xnnpack.enabled": True})
    assert config.model.use_kv_cache is True and config.backend.xnnpack.enabled is True
    assert config.base.params == str(params)


@pytest.mark.parametrize("field", ["model.no_such_flag", "nowhere.at_all", "model"])
def test_an_unknown_field_is_named(field: str) -> None:
    with pytest.raises(UsageError, match=f"{field!r} is not a field of ExecuTorch's LlmConfig"):
        llm_config({field: True})


def test_the_key_follows_the_params_content_not_where_the_export_writes(params: Path, tmp_path: Path) -> None:
    config = llm_config({"base.params": str(params), "model.use_kv_cache": True})
    key = config_key(config)
    elsewhere = llm_config(
        {"base.params": str(params), "model.use_kv_cache": True, "export.output_dir": str(tmp_path / "out")}
    )
    assert config_key(elsewhere) == key
    moved = tmp_path / "copy.json"
    moved.write_text(params.read_text())
    assert config_key(llm_config({"base.params": str(moved), "model.use_kv_cache": True})) == key
    params.write_text(json.dumps({"dim": 64, "n_layers": 3, "n_heads": 4, "vocab_size": 256}))
    assert config_key(config) != key  # a third layer is another program
    assert config_key(llm_config({"base.params": str(params), "model.use_kv_cache": False})) != config_key(config)


def test_a_params_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="base.params=.*is not a file"):
        config_key(llm_config({"base.params": str(tmp_path / "missing.json")}))


def test_the_recipe_label_is_the_program_s_precision_quantization_and_partitioner() -> None:
    assert recipe_of(llm_config({"backend.xnnpack.enabled": True})).label == "fp32-xnnpack"
    assert recipe_of(llm_config({})).label == "fp32-none"
    assert (
        recipe_of(llm_config({"quantization.qmode": "8da4w", "backend.xnnpack.enabled": True})).label
        == "int8-8da4w-xnnpack"
    )
    with pytest.raises(UsageError, match="qmode='int8'"):
        recipe_of(llm_config({"quantization.qmode": "int8"}))


def test_a_multimethod_config_is_refused_naming_its_methods_and_the_path_that_runs_them(
    params: Path, tmp_path: Path
) -> None:
    """export_llm keeps one method's graph nodes; a multimethod config would fail inside export_llama minutes later
    with a KeyError: refused first, saying what runs such a program (its .pte path and the two method names)."""
    from executorch.extension.llm.export.config.llm_config import MethodConfig

    from pytest_sme2.export.llm_export import export_llm

    config = llm_config({"base.params": str(params), "model.use_kv_cache": True})
    config.multimethod.methods = [MethodConfig("prefill"), MethodConfig("decode")]
    with pytest.raises(UsageError, match=r"\['prefill', 'decode'\].*llm_profile\(path, runner, prefill_method="):
        export_llm(config, tmp_path / "cache", name="two")
    assert not (tmp_path / "cache").exists()  # nothing exported or written
