"""One change, one true headline, on real counted runs: a tiny stack of layers (Linear, activation, Linear,
residual add, LayerNorm) is exported and counted under emulation, changed the way a model author would, counted
again, and judged against the first; the headline names the change the author made. Each expected headline is
written from the change (which layer, which node, which dtype), never from a run's output."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_emulated import counted_profiles

from pytest_sme2.gate import findings
from pytest_sme2.gate.baselines import record_of
from pytest_sme2.gate.judge import judge
from pytest_sme2.gate.verdict import Status
from pytest_sme2.run import emulation_setup

STATUS = emulation_setup.status()
pytestmark = pytest.mark.skipif(not STATUS.ready, reason=f"emulated target not ready: {STATUS.problem}")

STACK = '''
"""Layers of Linear, activation, Linear, residual add and LayerNorm (portable), a head and a softmax."""
import torch

WIDTHS = {widths}
DIM = 64


class Layer(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.up = torch.nn.Linear(DIM, hidden)
        self.act = torch.nn.{act}()
        self.down = torch.nn.Linear(hidden, DIM)
        self.norm = torch.nn.LayerNorm(DIM)

    def forward(self, x):
        return self.norm(x + self.down(self.act(self.up(x))))


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(h) for h in WIDTHS])
        self.head = torch.nn.Linear(DIM, 8)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return torch.softmax(self.head(x), dim={softmax_dim})


def get_eager_model():
    torch.manual_seed({seed})
    return Stack().eval(){dtype}


def get_example_inputs():
    return (torch.randn(1, {seq}, DIM){dtype},)
'''
# Two layers of different widths, so that which layer was inserted or removed is a fact of the program. Layers are
# built in order after one seed, so a layer appended to WIDTHS leaves the weights of those before it as they were;
# another seed changes every weight.
BASE = {"widths": "[128, 256]", "act": "ReLU", "softmax_dim": -1, "dtype": "", "seq": 16, "seed": 0}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("change-headlines-cache")


def _record(tmp_path: Path, cache: Path, name: str, **change: object) -> dict:
    """The baseline record of the stack with ``change``, counted with SME2 on, in its JSON form (edited below as a
    baseline file would be)."""
    [profile] = counted_profiles(
        tmp_path / name, "stack", [True], source=STACK.format(**{**BASE, **change}), cache=cache
    )
    return record_of(profile).to_json()


def _judged(tmp_path: Path, cache: Path, before: dict, after: dict) -> tuple[list[str], list, str]:
    """(the failing test's message lines, the verdicts, the whole-inference change as the headline writes it),
    of the stack changed from ``before`` to ``after``."""
    then, now = _record(tmp_path, cache, "before", **before), _record(tmp_path, cache, "after", **after)
    verdicts = judge("stack[on]", now, then)
    change = now["instructions"]["per_inference"] / then["instructions"]["per_inference"] - 1
    return findings.message_lines(findings.findings(verdicts)), verdicts, f"instructions per inference {change:+.1%}"


def _regressions(verdicts: list, check: str) -> list:
    return [v for v in verdicts if v.check == check and v.status == Status.REGRESSION]


def test_a_layer_inserted_in_the_middle_is_that_layer_added(tmp_path: Path, cache: Path) -> None:
    lines, verdicts, moved = _judged(tmp_path, cache, {}, {"widths": "[128, 192, 256]"})
    assert lines[0] == f"stack[on]: layers: 2 -> 3 blocks (layers.1 added): {moved}", lines
    # the 256-wide layer, renamed layers.1 -> layers.2, is paired with itself: not new, not grown
    assert not _regressions(verdicts, "op_instructions"), lines
    assert not _regressions(verdicts, "delegated_ops"), lines  # its LayerNorm runs outside, as the others' do
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("new")]
    assert {name.split(".", 2)[1] for name in ops.evidence["new_identity"] if " after " not in name} == {"1"}
    assert not ops.evidence["gone"]


def test_a_layer_appended_to_layers_alike_is_named_by_its_weights(tmp_path: Path, cache: Path) -> None:
    # issue 65: EfficientSAM with a 13th encoder block read "blocks.12 -> 13 blocks (blocks.0 added)": of layers
    # alike, the alignment that pairs the most units put the new one first. The graph alone cannot tell which of
    # four alike layers is new; their weights can: layers.0-.2 keep theirs, layers.3 has weights never seen before
    lines, verdicts, moved = _judged(tmp_path, cache, {"widths": "[128, 128, 128]"}, {"widths": "[128, 128, 128, 128]"})
    assert lines[0] == f"stack[on]: layers: 3 -> 4 blocks (layers.3 added): {moved}", lines
    assert not _regressions(verdicts, "op_instructions"), lines  # layers.0-.2 are themselves, unchanged
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("new")]
    assert {name.split(".", 2)[1] for name in ops.evidence["new_identity"] if " after " not in name} == {"3"}
    assert not ops.evidence["gone"]


def test_a_layer_added_among_layers_alike_whose_weights_all_changed_says_where_it_may_be(
    tmp_path: Path, cache: Path
) -> None:
    # issue 65: deep_autoencoder's Linear+BN+ReLU inserted after encoder_decoder.17 read ".27, .28, .29 added":
    # a ModuleList (or Sequential) renumbers the later layers, so of the 256-wide layers the graph cannot tell
    # which is new; the 128-wide first layer is not among them. Re-seeded, every weight changed, so the weights
    # cannot tell either: the headline says the stretch, as it did before weights were recorded
    lines, verdicts, moved = _judged(
        tmp_path, cache, {"widths": "[128, 256, 256]"}, {"widths": "[128, 256, 256, 256]", "seed": 1}
    )
    assert lines[0] == (
        "stack[on]: layers: 3 -> 4 blocks (1 added among layers.1 to .3, which are alike: the graph cannot tell "
        f"which; new name layers.3): {moved}"
    ), lines
    assert not _regressions(verdicts, "op_instructions"), lines  # alike layers count alike, whichever is paired


def test_a_layer_removed_from_the_middle_is_that_layer_removed(tmp_path: Path, cache: Path) -> None:
    lines, verdicts, moved = _judged(tmp_path, cache, {"widths": "[128, 192, 256]"}, {})
    assert lines[0] == f"stack[on]: layers: 3 -> 2 blocks (layers.1 removed): {moved}", lines
    # the removed layer's SME operators went with it: no SME kernel path is lost, no later operator changed
    assert not _regressions(verdicts, "op_instructions") and not _regressions(verdicts, "sme_path"), lines
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("gone")]
    assert not ops.evidence["new"]


def test_the_first_layer_removed_is_that_layer_removed_and_the_next_one_unchanged(tmp_path: Path, cache: Path) -> None:
    # the next layer then runs first: no first-call cost of the program (symbols bound lazily, once) may move to it
    lines, verdicts, moved = _judged(tmp_path, cache, {"widths": "[128, 192, 256]"}, {"widths": "[192, 256]"})
    assert lines[0] == f"stack[on]: layers: 3 -> 2 blocks (layers.0 removed): {moved}", lines
    assert not _regressions(verdicts, "op_instructions") and not _regressions(verdicts, "sme_path"), lines
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("gone")]
    assert not ops.evidence["new"]


def test_a_widened_ffn_names_its_layers_gemms(tmp_path: Path, cache: Path) -> None:
    # both layers' hidden width x1.5: both linears of every layer do half as much work again
    lines, verdicts, moved = _judged(tmp_path, cache, {}, {"widths": "[192, 384]"})
    assert lines[0].startswith("stack[on]: layers.*.up, layers.*.down GEMMs +"), lines
    assert lines[0].endswith(f"instructions: {moved}") or lines[0].endswith(f"each: {moved}"), lines
    assert "blocks" not in lines[0] and "head" not in lines[0]  # no layer added, the head unchanged


def test_a_changed_activation_is_named_in_every_layer(tmp_path: Path, cache: Path) -> None:
    lines, _, moved = _judged(tmp_path, cache, {}, {"act": "GELU"})
    assert lines[0] == f"stack[on]: layers.*.act: relu -> gelu in 2 blocks: {moved}", lines


def test_an_operator_that_falls_out_of_the_delegate_is_the_headline(tmp_path: Path, cache: Path) -> None:
    # XNNPACK's softmax is over the last dimension only: over dim 1 the same node runs as a portable kernel
    lines, verdicts, _ = _judged(tmp_path, cache, {}, {"softmax_dim": 1})
    assert lines[0].startswith("stack[on]: node(s) fell out of the delegate: <root>: aten._softmax.default"), lines
    [delegate] = _regressions(verdicts, "delegated_ops")
    assert dict(delegate.evidence) == {"fell_out": ["<root>: aten._softmax.default"], "new_outside": []}


def test_a_dtype_change_is_the_headline(tmp_path: Path, cache: Path) -> None:
    lines, _, moved = _judged(tmp_path, cache, {}, {"dtype": ".half()"})
    assert lines[0].startswith("stack[on]: dtype float32 -> float16 ("), lines
    assert lines[0].endswith(f"paired nodes): {moved}"), lines


def test_changed_example_inputs_lead_the_headline(tmp_path: Path, cache: Path) -> None:
    # issue 65: resnet8's input 32x32 -> 40x40 led with five CONV groups grown; the inputs were the fourth line
    lines, _, moved = _judged(tmp_path, cache, {}, {"seq": 24})
    assert lines[0].startswith("stack[on]: example inputs 1x16x64 float32 -> 1x24x64 float32"), lines
    assert lines[0].endswith(moved), lines


def _as_if_recorded_under(record: dict, executorch: str, rename: tuple[str, str] | None = None) -> dict:
    """The record as another executorch would have written it: its version, and (``rename``) its XNNPACK operators
    under another kernel family's name, as an upgrade that replaced a kernel family shows in the counts."""
    import json

    text = json.dumps(record)
    if rename is not None:
        text = text.replace(*rename)
    out = json.loads(text)
    out["provenance"]["executorch"] = executorch
    return out


def test_an_upgrade_leads_the_headline_with_the_versions_and_the_operators_it_rerouted(
    tmp_path: Path, cache: Path
) -> None:
    # issue 66: an upgrade is a change the gate explains. The stack's five Linears (two per layer and the head)
    # run XNNPACK's packed fp32 GEMM with SME2 on; a baseline whose executorch ran them as plain F32 GEMMs
    now = _record(tmp_path, cache, "now")
    then = _as_if_recorded_under(
        now, "1.4.1+cpu", ("Fully Connected (NC, PF32) GEMM", "Fully Connected (NC, F32) GEMM")
    )
    lines = findings.message_lines(findings.findings(judge("stack[on]", now, then)))
    version = now["provenance"]["executorch"]
    assert lines[0].startswith(
        f"stack[on]: executorch 1.4.1+cpu -> {version}: 5 operators run other XNNPACK operators "
        "(Fully Connected (NC, F32) GEMM -> Fully Connected (NC, PF32) GEMM x5)"
    ), lines


def test_an_upgrade_that_moved_no_count_says_so(tmp_path: Path, cache: Path) -> None:
    now = _record(tmp_path, cache, "now")
    verdicts = judge("stack[on]", now, _as_if_recorded_under(now, "1.4.1+cpu"))
    assert not [v for v in verdicts if v.status == Status.REGRESSION]
    [note] = [v for v in verdicts if v.check == "provenance"]
    assert "executorch 1.4.1+cpu then" in note.message
    count = now["instructions"]["per_inference"]
    assert f"the upgrade left its count unchanged: {count:,} instructions per inference" in note.message


AUTOENCODER = '''
"""The executorch wheel's own MLPerf Tiny deep autoencoder; INSERT puts a Linear(128, 128)+BatchNorm+ReLU after
encoder_decoder.17 (the ReLU after the bottleneck's Linear(8, 128)), as a model author edits a Sequential."""
import torch
from executorch.examples.models.mlperf_tiny.deep_autoencoder import DeepAutoEncoder

INSERT = {insert}


def get_eager_model():
    torch.manual_seed(0)
    model = DeepAutoEncoder()
    if INSERT:
        layers = list(model.encoder_decoder)
        layers[18:18] = [torch.nn.Linear(128, 128), torch.nn.BatchNorm1d(128), torch.nn.ReLU()]
        model.encoder_decoder = torch.nn.Sequential(*layers)
    return model.eval()


def get_example_inputs():
    torch.manual_seed(1)
    return (torch.rand(1, 640) * 2 - 1,)
'''


def test_the_wheels_deep_autoencoder_with_a_block_inserted_names_it_where_it_was_made(
    tmp_path: Path, cache: Path
) -> None:
    # issue 65: "27 -> 30 blocks (encoder_decoder.27, .28, .29 added)". A Sequential renumbers what follows the
    # insertion, so in the graph alone the program is the same as the three appended. The weights are not: the
    # old .18 to .26 keep theirs under the names .21 to .29, and the inserted Linear's are new. (Written before
    # the run, from the edit: layers[18:18] = three children, 27 of them before.)
    [then], [now] = (
        counted_profiles(tmp_path / name, "autoencoder", [True], source=AUTOENCODER.format(insert=insert), cache=cache)
        for name, insert in (("before", False), ("after", True))
    )
    verdicts = judge("ae[on]", record_of(now), record_of(then))
    lines = findings.message_lines(findings.findings(verdicts))
    assert lines[0].startswith(
        "ae[on]: encoder_decoder: 27 -> 30 blocks (3 inserted: encoder_decoder.18, .19, .20; "
        "encoder_decoder.18 to .26 moved to .21 to .29): instructions per inference +"
    ), lines
    # nothing after the insertion reads as new, changed or gone: the counted operators pair the same way
    assert not _regressions(verdicts, "op_instructions"), lines
    [ops] = [v for v in verdicts if v.check == "op_instructions" and v.evidence.get("new")]
    new_blocks = {name.split(":", 1)[0] for name in ops.evidence["new_identity"] if " after " not in name}
    assert new_blocks and new_blocks <= {"encoder_decoder.18", "encoder_decoder.19", "encoder_decoder.20"}, ops
    assert not ops.evidence["gone"]


RESNET8 = '''
"""The executorch wheel's own MLPerf Tiny ResNet-8 at SIZE x SIZE."""
import torch
from executorch.examples.models.mlperf_tiny.resnet8 import ResNet8


def get_eager_model():
    torch.manual_seed(0)
    return ResNet8().eval()


def get_example_inputs():
    torch.manual_seed(1)
    return (torch.rand(1, 3, {size}, {size}),)
'''


def test_the_wheels_resnet8_on_larger_inputs_leads_with_the_inputs(tmp_path: Path, cache: Path) -> None:
    # issue 65: resnet8's input 32x32 -> 40x40 listed five CONV groups first and the inputs on the fourth line
    [then], [now] = (
        counted_profiles(tmp_path / f"r{size}", "resnet8", [True], source=RESNET8.format(size=size), cache=cache)
        for size in (32, 40)
    )
    lines = findings.message_lines(findings.findings(judge("r8[on]", record_of(now), record_of(then))))
    assert lines[0].startswith("r8[on]: example inputs 1x3x32x32 float32 -> 1x3x40x40 float32"), lines


def test_an_upgrade_that_moved_nothing_adds_no_change_note_beside_its_provenance(tmp_path: Path, cache: Path) -> None:
    # torch 2.13.0+cpu -> 2.14.1+cu130 on the smoke tests (2026-12-03): counts equal, two notes said the same
    now = _record(tmp_path, cache, "now")
    then = _as_if_recorded_under(now, now["provenance"]["executorch"])
    then["provenance"]["torch"] = "2.13.0+cpu" if now["provenance"]["torch"] != "2.13.0+cpu" else "2.12.0+cpu"
    verdicts = judge("stack[on]", now, then)
    assert not [v for v in verdicts if v.check == "change"], [v.message for v in verdicts if v.check == "change"]
    assert [v for v in verdicts if v.check == "provenance" and "left its count unchanged" in v.message]
