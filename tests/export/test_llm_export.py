"""ExecuTorch's LLM export as a recipe: its config, its key and its label (the real export_llama run and the gate
on its program: tests/plugin/test_llm_fixture.py)."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import DamagedCacheEntryWarning, UsageError
from pytest_sme2.export import llm_export
from pytest_sme2.export.cache_entry import ETRECORD_NAME, INPUTS_NAME, META_NAME, PTE_NAME
from pytest_sme2.export.export import ExportedModel, Recipe
from pytest_sme2.export.llm_export import config_key, export_llm, llm_config, recipe_of


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


# ------------------------------------------------- the export_llm cache (issue 64, bad 6 and 7; weak: the name)
# export_llama itself takes about a minute (tests/plugin/test_llm_fixture.py runs it): here a stand-in writes the
# entry's files, so what is tested is the cache's answer alone.


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """export_llama replaced by a program that names its context length; the context of every export run."""
    runs: list[int] = []

    def export_into(config: Any, out: Path, name: str, recipe: Recipe) -> dict[str, Any]:
        context = config.export.max_context_length
        runs.append(context)
        (out / PTE_NAME).write_bytes(b"program of context %d" % context)
        (out / ETRECORD_NAME).write_bytes(b"etrecord")
        (out / INPUTS_NAME).write_bytes(b"inputs")
        return {"delegated_nodes": 3, "non_delegated_nodes": 1, "delegated_subgraphs": 1, "ops": []}

    monkeypatch.setattr(llm_export, "_export_into", export_into)
    monkeypatch.setattr(
        llm_export, "write_entry_meta", lambda staging, meta: (staging / META_NAME).write_text(json.dumps(meta))
    )
    return runs


def _config(params: Path, context: int) -> dict[str, Any]:
    return {"base.params": str(params), "export.max_context_length": context, "export.max_seq_length": context}


def _exported_again(config: dict[str, Any], cache: Path) -> tuple[ExportedModel, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = export_llm(config, cache, name="tiny")
    return exported, [str(w.message) for w in caught if issubclass(w.category, DamagedCacheEntryWarning)]


def test_another_config_s_entry_under_this_key_is_refused_and_exported_again(
    params: Path, tmp_path: Path, exports: list[int]
) -> None:
    """A context-64 entry copied to the context-128 config's folder with only cache_key edited was used as is
    (from_cache, no warning, the 64-context program)."""
    cache = tmp_path / "cache"
    short, long = export_llm(_config(params, 64), cache, "tiny"), export_llm(_config(params, 128), cache, "tiny")
    shutil.rmtree(long.directory)
    shutil.copytree(short.directory, long.directory)
    meta = json.loads((long.directory / META_NAME).read_text())
    (long.directory / META_NAME).write_text(json.dumps({**meta, "cache_key": long.cache_key}))
    again, messages = _exported_again(_config(params, 128), cache)
    assert len(messages) == 1 and str(long.directory) in messages[0], messages
    assert "records another config: export.max_context_length 64, asked 128" in messages[0]
    assert not again.from_cache and again.path.read_bytes() == b"program of context 128"
    assert exports == [64, 128, 128]
    assert _exported_again(_config(params, 128), cache)[0].from_cache  # the new entry answers


@pytest.mark.parametrize(
    "change, named",
    [
        ({"export_seconds": "fast"}, "export_seconds is 'fast', not a number"),
        ({"delegation": "garbage"}, "delegation is str, not an object"),
        ({"model": "other"}, "model is 'other', and this export_llm asks for 'tiny'"),
        ({"recipe": {"dtype": "fp16", "quant": None, "partitioner": "none"}}, "recipe is"),
        ({"program_digest": "0" * 64}, "program_digest '0000"),
        ({"read_files": {"base.params": "0" * 64}}, "records another read file: base.params '0000"),
    ],
)
def test_a_damaged_entry_is_warned_about_and_exported_again(
    params: Path, tmp_path: Path, exports: list[int], change: dict[str, Any], named: str
) -> None:
    """`export_seconds: "fast"` crashed with a bare ValueError and `delegation: "garbage"` was returned as is;
    the model export cache warns and exports again on the same damage."""
    cache = tmp_path / "cache"
    first = export_llm(_config(params, 64), cache, "tiny")
    meta = json.loads((first.directory / META_NAME).read_text())
    (first.directory / META_NAME).write_text(json.dumps({**meta, **change}))
    again, messages = _exported_again(_config(params, 64), cache)
    assert len(messages) == 1 and named in messages[0] and "it is exported again" in messages[0], messages
    assert not again.from_cache and exports == [64, 64]
    assert isinstance(again.export_seconds, float) and again.delegation["delegated_nodes"] == 3


@pytest.mark.parametrize("name", ["../escaped", "a/b", ".hidden", "", "x y"])
def test_a_name_that_cannot_name_an_entry_is_refused_before_the_export(
    params: Path, tmp_path: Path, exports: list[int], name: str
) -> None:
    """`../escaped` wrote the entry outside the cache folder; `a/b` failed after 53 s of export."""
    with pytest.raises(UsageError, match=rf"export_llm\(\): name {re.escape(repr(name))} is not valid"):
        export_llm(_config(params, 64), tmp_path / "cache", name)
    assert exports == [] and not (tmp_path / "escaped").exists()
