"""Models that live in a package (issue 22, "Also"): registered by file they import as part of their package;
registered by module name without the project root on sys.path, the error names pytest's pythonpath setting."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from conftest import TINY_MODEL
from pytest_sme2.errors import ModelDefinitionError
from pytest_sme2.model.registry import ModelRegistry

MODEL = """
from .blocks import get_eager_model
from mynet.blocks import get_example_inputs
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``<project>/mynet/{__init__,blocks,model}.py``: model.py imports blocks.py relatively and absolutely."""
    root = tmp_path / "project"
    (root / "mynet").mkdir(parents=True)
    (root / "mynet" / "__init__.py").write_text("")
    (root / "mynet" / "blocks.py").write_text(TINY_MODEL)
    (root / "mynet" / "model.py").write_text(MODEL)
    # Neither the current folder nor another test's project (tests/cli/test_init.py imports its own mynet, and a
    # registry puts a package's root on sys.path) may make mynet importable here.
    monkeypatch.setattr(
        sys, "path", [p for p in sys.path if p not in ("", ".", str(Path.cwd())) and not (Path(p) / "mynet").exists()]
    )
    monkeypatch.chdir(tmp_path)  # not the project: the current folder must not make mynet importable
    _forget_mynet()
    yield root
    _forget_mynet()


def _forget_mynet() -> None:
    for name in [n for n in sys.modules if n == "mynet" or n.startswith("mynet.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def test_a_package_module_registered_by_file_imports_as_part_of_its_package(project: Path) -> None:
    registry = ModelRegistry()
    registry.register("edge_seg", str(project / "mynet" / "model.py"))
    model = registry.get("edge_seg")
    assert model.module.__name__ == "mynet.model"  # not pytest_sme2_models.edge_seg
    assert model.module.get_eager_model is sys.modules["mynet.blocks"].get_eager_model  # one blocks module
    assert sys.path[0] == str(project)
    assert model.get_example_inputs()[0].shape == (1, 3, 16, 16)


def test_a_plain_file_still_imports_under_its_own_name(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(TINY_MODEL)
    registry = ModelRegistry()
    registry.register("plain", str(tmp_path / "plain.py"))
    assert registry.get("plain").module.__name__ == "pytest_sme2_models.plain"


def test_a_package_of_the_same_name_elsewhere_is_refused_naming_both(project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "mynet").mkdir(parents=True)
    (other / "mynet" / "__init__.py").write_text("")
    (other / "mynet" / "model.py").write_text(MODEL)
    (other / "mynet" / "blocks.py").write_text(TINY_MODEL)
    sys.path.insert(0, str(other))
    importlib.import_module("mynet.model")  # another mynet is imported first
    registry = ModelRegistry()
    registry.register("edge_seg", str(project / "mynet" / "model.py"))
    with pytest.raises(
        ModelDefinitionError, match=r"is module mynet\.model of the package under .*project.* " r"imports from .*other"
    ):
        registry.get("edge_seg")


def test_a_module_name_whose_package_is_in_the_rootdir_says_to_set_pythonpath(project: Path) -> None:
    registry = ModelRegistry(root=project)
    registry.register("edge_seg", "mynet.model")
    with pytest.raises(ModelDefinitionError) as caught:
        registry.get("edge_seg")
    message = str(caught.value)
    assert "No module named 'mynet'" in message
    assert f"{project / 'mynet'} exists, but {project} is not on sys.path" in message
    assert 'add pythonpath = ["."] under [tool.pytest.ini_options]' in message
    assert "edge_seg = mynet/model.py" in message


def test_a_module_typo_inside_an_importable_package_names_the_modules_not_pythonpath(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's trial: with pythonpath set and working, "mynet.nett" was diagnosed as the rootdir not on sys.path."""
    monkeypatch.syspath_prepend(str(project))
    registry = ModelRegistry(root=project)
    registry.register("edge_seg", "mynet.modle")
    with pytest.raises(ModelDefinitionError) as caught:
        registry.get("edge_seg")
    message = str(caught.value)
    assert "sys.path" not in message and "pythonpath" not in message
    assert f"{project / 'mynet'} has no module 'modle'; its modules: blocks, model" in message
    assert "check the module name in edge_seg = mynet.modle" in message


def test_a_package_registered_by_module_name_is_offered_its_init_file(project: Path) -> None:
    """A user's trial: ``mynet = mynet`` without pythonpath advised ``mynet = mynet.py``, a file that does not
    exist for a package; the advice is its ``__init__.py``, and following it works."""
    (project / "mynet" / "__init__.py").write_text(TINY_MODEL)
    registry = ModelRegistry(root=project)
    registry.register("mynet", "mynet")
    with pytest.raises(ModelDefinitionError, match=r"register the model by file: mynet = mynet/__init__\.py$"):
        registry.get("mynet")
    advised = ModelRegistry()
    advised.register("mynet", str(project / "mynet" / "__init__.py"))
    assert advised.get("mynet").get_example_inputs()[0].shape == (1, 3, 16, 16)


def test_a_folder_or_a_file_that_is_not_python_is_named_with_the_fix(project: Path) -> None:
    """A user's trial: ``mynet = mynet/`` gave "importing mynet/ failed: AssertionError: AssertionError"."""
    registry = ModelRegistry(root=project)
    registry.register("mynet", str(project / "mynet"))
    with pytest.raises(
        ModelDefinitionError,
        match=rf"{project / 'mynet'} is a folder; register the file that defines "
        rf"get_eager_model\(\) and get_example_inputs\(\): mynet = "
        rf"{project / 'mynet' / '__init__.py'} for a package",
    ):
        registry.get("mynet")
    # a review: inside a package, or given by a bare file name, a non-.py file got import errors of a module name
    (project / "mynet" / "weights.bin").write_bytes(b"\0")
    (project / "weights.bin").write_bytes(b"\0")
    registry.register("in_package", str(project / "mynet" / "weights.bin"))
    registry.register("bare", "weights.bin")
    for name, path in (("in_package", project / "mynet" / "weights.bin"), ("bare", project / "weights.bin")):
        with pytest.raises(
            ModelDefinitionError,
            match=rf"{path} is not a Python source file; register the \.py " r"file that defines get_eager_model\(\)",
        ):
            registry.get(name)


def test_a_module_name_that_exists_nowhere_gets_no_pythonpath_hint(project: Path) -> None:
    registry = ModelRegistry(root=project)
    registry.register("edge_seg", "othernet.model")
    with pytest.raises(ModelDefinitionError) as caught:
        registry.get("edge_seg")
    assert "No module named 'othernet'" in str(caught.value) and "pythonpath" not in str(caught.value)


def test_the_plugin_imports_a_package_model_registered_by_file(
    pytester: pytest.Pytester, shared_export_cache: Path
) -> None:
    """``sme2_models = edge_seg = mynet/model.py`` in a real session: exported, and the module is mynet.model."""
    (pytester.path / "mynet").mkdir()
    (pytester.path / "mynet" / "__init__.py").write_text("")
    (pytester.path / "mynet" / "blocks.py").write_text(TINY_MODEL)
    (pytester.path / "mynet" / "model.py").write_text(MODEL)
    pytester.makeini(
        f"[pytest]\nsme2_target = host\nsme2_cache_dir = {shared_export_cache}\n"
        "sme2_models = edge_seg = mynet/model.py\nfilterwarnings = ignore\n"
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
        import pytest

        @pytest.mark.model("edge_seg")
        def test_export(exported_pte, sme2_session):
            assert exported_pte.path.exists()
            assert sme2_session.registry.get("edge_seg").module.__name__ == "mynet.model"
        """
        )
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_an_import_error_in_another_module_of_the_package_names_its_line(project: Path) -> None:
    """A user's trial: a bad import in mynet/blocks.py read "importing mynet.model failed: ModuleNotFoundError:
    No module named 'nonexistent_pkg'" with no file or line."""
    (project / "mynet" / "blocks.py").write_text("import torch\nimport nonexistent_pkg\n" + TINY_MODEL)
    registry = ModelRegistry()
    registry.register("edge_seg", str(project / "mynet" / "model.py"))
    with pytest.raises(ModelDefinitionError) as caught:
        registry.get("edge_seg")
    message = str(caught.value)
    assert "No module named 'nonexistent_pkg'" in message
    assert f"(at {project / 'mynet' / 'blocks.py'}:2: import nonexistent_pkg)" in message
    # registered by module name (its package found on sys.path): the same place
    for name in [n for n in sys.modules if n == "mynet" or n.startswith("mynet.")]:
        del sys.modules[name]
    sys.path.insert(0, str(project))
    by_name = ModelRegistry(root=project)
    by_name.register("edge_seg", "mynet.model")
    with pytest.raises(ModelDefinitionError) as caught:
        by_name.get("edge_seg")
    assert f"(at {project / 'mynet' / 'blocks.py'}:2: import nonexistent_pkg)" in str(caught.value)


def test_an_error_raised_in_a_module_of_the_package_is_placed_at_its_own_line(project: Path) -> None:
    """An export error is placed at the innermost line of the model's folder (mynet/blocks.py), not at the
    caller in the file that defines the model (mynet/model.py), and never in installed packages."""
    from pytest_sme2.model.registry import where_in_author_code

    (project / "mynet" / "blocks.py").write_text("def block(x):\n    return x.view(-1, 7)\n")
    (project / "mynet" / "model.py").write_text(
        "from mynet.blocks import block\n\ndef forward(x):\n" "    return block(x)\n"
    )
    sys.path.insert(0, str(project))
    import torch
    from mynet.model import forward  # noqa: E402 (the project's own package, importable now)

    with pytest.raises(RuntimeError) as caught:
        forward(torch.ones(3, 3))
    where = where_in_author_code(caught.value, project / "mynet")
    assert where == f" (at {project / 'mynet' / 'blocks.py'}:2: return x.view(-1, 7))"
    assert where_in_author_code(caught.value, project / "elsewhere") == ""
    assert where_in_author_code(caught.value, None) == ""


POOLED = """
import torch


def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 10)).eval()


def get_example_inputs():
    return (torch.ones(1, 3, 16, 16),)
"""


def test_a_baselines_note_names_the_package_file_and_the_input_shape_that_changed(
    pytester: pytest.Pytester, shared_export_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's trial: an edit in mynet/blocks.py and a new input shape were both noted as "the model's source
    changed". Real sessions on the host target: the note names mynet/blocks.py, then the new input shape."""
    from helpers_gate import UPDATE

    from conftest import quick_host_ini

    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the gate on
    (pytester.path / "mynet").mkdir()
    (pytester.path / "mynet" / "__init__.py").write_text("")
    (pytester.path / "mynet" / "blocks.py").write_text(POOLED)
    (pytester.path / "mynet" / "model.py").write_text(MODEL)
    (pytester.path / "models").mkdir()
    (pytester.path / "pytest.ini").write_text(
        quick_host_ini(shared_export_cache, "sme2_models = edge_seg = " "mynet/model.py", "filterwarnings = ignore")
    )
    pytester.makepyfile(
        test_net="""
import pytest

@pytest.mark.model("edge_seg")
def test_net(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""
    )

    def note() -> str:
        pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-artifacts-dir=artifacts")
        newest = max((pytester.path / "artifacts").glob("session-*"), key=lambda p: p.stat().st_mtime)
        [verdicts] = newest.glob("*/baseline-verdicts~*.txt")
        return next(
            (line for line in verdicts.read_text().splitlines() if "since the baseline was recorded" in line), ""
        )

    pytester.runpytest_inprocess("-p", "no:cacheprovider", *UPDATE).assert_outcomes(passed=1)
    assert note() == ""  # nothing changed
    (pytester.path / "mynet" / "blocks.py").write_text(POOLED.replace("torch.nn.ReLU()", "torch.nn.ReLU6()"))
    assert "the model's traced program changed (files changed: mynet/blocks.py)" in note()
    (pytester.path / "mynet" / "blocks.py").write_text(POOLED.replace("(1, 3, 16, 16)", "(1, 3, 20, 20)"))
    changed = note()
    assert "(none of its own files changed" not in changed and "files changed: mynet/blocks.py" in changed
    assert "example inputs 1x3x16x16 float32 then, 1x3x20x20 float32 now" in changed


def test_source_files_keep_the_models_own_file_and_skip_installed_trees(tmp_path: Path) -> None:
    """A review: the cap on a package's files cut the model's own file (sorted last), so an edit of it read "none of
    its own files changed"; and a model inside an installed package would hash that package's whole tree."""
    from types import ModuleType

    from pytest_sme2.model.registry import SOURCE_FILES_LIMIT, Model, source_files

    package = tmp_path / "big"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for i in range(SOURCE_FILES_LIMIT + 50):
        (package / f"m{i:04d}.py").write_text(f"x = {i}\n")
    own = package / "zz_model.py"
    own.write_text(TINY_MODEL)
    files = source_files(Model("big", ModuleType("big.zz_model"), own))
    assert len(files) == SOURCE_FILES_LIMIT and "big/zz_model.py" in files and "big/__init__.py" in files
    installed = tmp_path / "lib" / "site-packages" / "vendor"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (installed / "other.py").write_text("")
    (installed / "model.py").write_text(TINY_MODEL)
    assert list(source_files(Model("v", ModuleType("vendor.model"), installed / "model.py"))) == ["model.py"]
