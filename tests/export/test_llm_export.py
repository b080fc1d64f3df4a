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


def test_enum_fields_take_their_value_or_name_as_a_string_and_name_the_choices_when_wrong() -> None:
    """Issue 65: ``"base.model_class": "smollm2"`` reached export_llama as a string, which failed deep inside with
    "'str' object has no attribute 'value'". ExecuTorch's own command line takes these as strings."""
    from executorch.extension.llm.export.config.llm_config import DtypeOverride, ModelType

    config = llm_config({"base.model_class": "smollm2", "model.dtype_override": "fp32"})
    assert config.base.model_class is ModelType.smollm2 and config.model.dtype_override is DtypeOverride.fp32
    assert config_key(config) == config_key(llm_config({"base.model_class": ModelType.smollm2}))
    with pytest.raises(
        UsageError, match=r"base.model_class='smollm9' is not one of ExecuTorch's ModelType values: .*" r"smollm2"
    ):
        llm_config({"base.model_class": "smollm9"})


def test_a_family_s_published_shape_is_written_as_llama_params(tmp_path: Path) -> None:
    from executorch.examples.models.llama.model_args import ModelArgs

    from pytest_sme2.export.llm_families import FAMILIES, llm_params

    for family in FAMILIES:
        path = llm_params(family, tmp_path, n_layers=2)
        params = json.loads(path.read_text())
        assert params["n_layers"] == 2 and path.name == f"{family}.json"
        args = ModelArgs(**params)  # every key is one of ExecuTorch's llama ModelArgs
        assert args.dim == FAMILIES[family]["dim"] and args.n_kv_heads < args.n_heads  # grouped-query attention
    assert json.loads(llm_params("smollm2_135m", tmp_path).read_text())["n_layers"] == 30  # the published depth
    with pytest.raises(UsageError, match="no published shape of 'gpt5'.*smollm2_135m"):
        llm_params("gpt5", tmp_path)
    with pytest.raises(UsageError, match="n_layers=0"):
        llm_params("qwen3_0_6b", tmp_path, n_layers=0)


def test_a_model_class_that_needs_a_missing_package_names_it_and_the_way_round(tmp_path: Path) -> None:
    """Real export_llama: ExecuTorch's smollm2 model class imports torchtune, not a dependency of this project."""
    import importlib.util

    from pytest_sme2.errors import ExportError

    if importlib.util.find_spec("torchtune") is not None:
        pytest.skip("torchtune is installed here: smollm2's model class may export")
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"dim": 64, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256}))
    config = {"base.model_class": "smollm2", "base.params": str(params), "model.use_kv_cache": True}
    from pytest_sme2.errors import UninitialisedWeightsWarning

    with pytest.raises(ExportError) as caught, pytest.warns(UninitialisedWeightsWarning, match="no base.checkpoint"):
        export_llm(config, tmp_path / "cache", name="needs_torchtune")
    text = str(caught.value)
    assert "model class 'smollm2' needs the package 'torchtune', which is not installed" in text
    assert "base.model_class='llama3' with base.params=pytest_sme2.llm_params('smollm2_135m', FOLDER)" in text
