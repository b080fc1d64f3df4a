"""The operator-category table, checked against an expectation table written from what each operator does."""

from __future__ import annotations

import pytest

from pytest_sme2.evidence.categories import Category, classify, strip_instance

CONV, GEMM, DM, EW, OTHER = (
    Category.CONV,
    Category.GEMM,
    Category.DATA_MOVEMENT,
    Category.ELEMENTWISE,
    Category.OTHER,
)

# Every event name FACTS.md lists as seen, with the category it belongs to:
# convolutions -> CONV; matrix products -> GEMM; layout / copy / dtype conversion
# -> DATA_MOVEMENT; per-element arithmetic and activations -> ELEMENTWISE;
# pooling, reductions, softmax, normalisation -> OTHER.
EXPECTED = {
    # XNNPACK fp32
    "Convolution (NHWC, F32) IGEMM #1": CONV,
    "Convolution (NHWC, F32) DWConv #3": CONV,
    "Fully Connected (NC, F32) GEMM #2": GEMM,
    "Batch Matrix Multiply (NC, F32) GEMM #1": GEMM,
    "Max Pooling (NHWC, F32) #1": OTHER,
    "Mean (ND) Reduce2 #1": OTHER,
    "Softmax (NC, F32) #1": OTHER,
    "Transpose (ND, X32) #1": DM,
    "Copy (NC, X32) #1": DM,
    "Static Reshape (NC) #1": DM,
    "Add (ND) #1": EW,
    "Multiply (ND) #1": EW,
    "Divide (ND) #1": EW,
    "Clamp (NC) #1": EW,
    "HardSwish (NC) #1": EW,
    # XNNPACK fp16
    "Convolution (NHWC, F16) IGEMM #1": CONV,
    "Convolution (NHWC, F16) DWConv #2": CONV,
    "Fully Connected (NC, F16) GEMM #4": GEMM,
    "Batch Matrix Multiply (NC, F16) GEMM #1": GEMM,
    "Max Pooling (NHWC, F16) #1": OTHER,
    "Softmax (NC, F16) #1": OTHER,
    "Transpose (ND, X16) #2": DM,
    "Copy (NC, X16) #1": DM,
    # XNNPACK int8
    "Convolution (NHWC, QC8) IGEMM #1": CONV,
    "Fully Connected (NC, QS8, QC8W) GEMM #3": GEMM,
    "Transpose (ND, X8) #1": DM,
    "Convert (NC) #5": DM,
    "Invalid Unary Op #1": EW,
    # packed (SME/SME2 KleidiAI) forms
    "Fully Connected (NC, PF32) GEMM #1": GEMM,
    "Convolution (NHWC, PF32) IGEMM #2": CONV,
    "Fully Connected (NC, PF16) GEMM #1": GEMM,
    "Convolution (NHWC, PF16) IGEMM #1": CONV,
    # portable (non-delegated) kernels
    "native_call_native_layer_norm.out": OTHER,
    "native_call__to_dim_order_copy.out": DM,
    "native_call_mul.Scalar_out": EW,
    "native_call_expand_copy.out": DM,
    "native_call_select_copy.int_out": DM,
    "native_call_where.self_out": EW,
    "native_call_eq.Scalar_out": EW,
    "native_call_any.out": OTHER,
    "native_call_logical_not.out": EW,
    # a KV cache written in place by the reference attention: moving keys and values
    "native_call_index_put.out": DM,
    # ExecuTorch's LLM custom ops, named namespace::op.overload by the runtime (seen on tiny_llama, host target):
    # the KV-cache write moves keys and values; the attention is two matrix products around a softmax
    "llama::update_cache.out": DM,
    "llama::custom_sdpa.out": GEMM,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_seen_event_names_have_expected_category(name: str) -> None:
    op = classify(name)
    assert op.category is EXPECTED[name], f"{name!r} classified {op}"
    assert op.known is True
    assert op.portable is (name.startswith("native_call_") or "::" in name)


@pytest.mark.parametrize(
    "name, kind",
    [
        ("Invalid Unary Op #1", "Invalid Unary Op"),
        ("Invalid Unary Op", "Invalid Unary Op"),
        ("Convolution (NHWC, F32) IGEMM #1", "Convolution"),
        ("Batch Matrix Multiply (NC, F32) GEMM #1", "Batch Matrix Multiply"),
        ("native_call_native_layer_norm.out", "native_layer_norm"),
        ("native_call__to_dim_order_copy.out", "_to_dim_order_copy"),
        ("llama::custom_sdpa.out", "llama::custom_sdpa"),
    ],
)
def test_kind_is_the_whole_operator_type(name: str, kind: str) -> None:
    assert classify(name).kind == kind


def test_formats_and_kernel_are_split_out() -> None:
    op = classify("Fully Connected (NC, QS8, QC8W) GEMM #3")
    assert op.formats == ("NC", "QS8", "QC8W")
    assert op.kernel == "GEMM"
    dw = classify("Convolution (NHWC, F32) DWConv #3")
    assert dw.formats == ("NHWC", "F32")
    assert dw.kernel == "DWConv"


# ---------------------------------------------------------------- the traps


@pytest.mark.parametrize("name", ["Convert (NC) #1", "Convert (NC, F32, QD8) #2", "Convert (NC, QS8, F32) #1"])
def test_convert_is_not_a_convolution(name: str) -> None:
    assert classify(name).category is not CONV


@pytest.mark.parametrize("name", ["Resize Bilinear (NHWC, F32) #1", "Resize Bilinear (NHWC, F16) #2"])
def test_resize_bilinear_is_not_gemm(name: str) -> None:
    op = classify(name)
    assert op.category is not GEMM
    assert op.category is OTHER
    assert op.known


@pytest.mark.parametrize(
    "name",
    [
        "Fully Connected (NC, F32) GEMM #1",
        "Fully Connected (NC, QS8, QC8W) GEMM #1",
        "Batch Matrix Multiply (NC, F32) GEMM #1",
        "Batch Matrix Multiply (NC, F16) GEMM #7",
    ],
)
def test_fully_connected_and_batch_matmul_are_gemm(name: str) -> None:
    assert classify(name).category is GEMM


def test_deconvolution_is_conv() -> None:
    assert classify("Deconvolution (NHWC, F32) #1").category is CONV


@pytest.mark.parametrize("name", ["Max Pooling (NHWC, F32) #1", "Max Pooling (NHWC, F16) #3"])
def test_max_pooling_is_not_elementwise(name: str) -> None:
    op = classify(name)
    assert op.category is not EW
    assert op.category is OTHER
    assert op.known


# ------------------------------------------------------------ packed (SME) path


@pytest.mark.parametrize(
    "name",
    [
        "Fully Connected (NC, PF32) GEMM #1",
        "Convolution (NHWC, PF32) IGEMM #2",
        "Fully Connected (NC, PF16) GEMM #3",
        "Convolution (NHWC, PF16) IGEMM #1",
        "Convolution (NHWC, PQS8, QS8, QC8W) IGEMM #4",
        "Fully Connected (NC, PQS8, QC8W) GEMM #2",
    ],
)
def test_packed_formats_are_packed(name: str) -> None:
    assert classify(name).packed is True


@pytest.mark.parametrize(
    "name",
    [
        "Fully Connected (NC, F32) GEMM #1",
        "Convolution (NHWC, F32) IGEMM #1",
        "Convolution (NHWC, F32) DWConv #1",
        "Convolution (NHWC, F16) IGEMM #1",
        "Convolution (NHWC, QC8) IGEMM #1",
        "Fully Connected (NC, QS8, QC8W) GEMM #1",
        # int8 dynamic packs activations (QP8) with or without SME: NEON kernels exist too
        "Fully Connected (NC, QP8, F32, QC8W) GEMM #1",
        "Transpose (ND, X32) #1",
        "native_call_native_layer_norm.out",
    ],
)
def test_plain_formats_are_not_packed(name: str) -> None:
    assert classify(name).packed is False


# ---------------------------------------------------------------- unknowns


@pytest.mark.parametrize(
    "name",
    ["Frobnicate (NC, F32) #1", "Totally New Op (ND) Kernel #9", "native_call_frobnicate.out", "something"],
)
def test_unknown_names_are_other_and_flagged(name: str) -> None:
    op = classify(name)
    assert op.category is OTHER
    assert op.known is False


# ----------------------------------------------------------- strip_instance


@pytest.mark.parametrize(
    "name, stripped",
    [
        ("Convolution (NHWC, F32) IGEMM #12", "Convolution (NHWC, F32) IGEMM"),
        ("Add (ND) #1", "Add (ND)"),
        ("Invalid Unary Op #3", "Invalid Unary Op"),
        ("native_call_mul.Scalar_out", "native_call_mul.Scalar_out"),
        ("Add (ND)", "Add (ND)"),
    ],
)
def test_strip_instance(name: str, stripped: str) -> None:
    assert strip_instance(name) == stripped


def test_strip_instance_groups_instances_of_one_kind() -> None:
    names = [
        "Fully Connected (NC, F32) GEMM #1",
        "Fully Connected (NC, F32) GEMM #2",
        "Fully Connected (NC, F32) GEMM #17",
    ]
    assert {strip_instance(n) for n in names} == {"Fully Connected (NC, F32) GEMM"}


# ------------------------------------------------------------ Category.parse


@pytest.mark.parametrize(
    "text, expected",
    [
        ("data_movement", DM),
        ("Data Movement", DM),
        ("data-movement", DM),
        ("CONV", CONV),
        ("conv", CONV),
        (" gemm ", GEMM),
        ("Elementwise", EW),
        ("other", OTHER),
        (Category.GEMM, GEMM),
    ],
)
def test_category_parse_accepts(text, expected: Category) -> None:
    assert Category.parse(text) is expected


def test_category_parse_rejects_unknown_with_valid_names() -> None:
    with pytest.raises(ValueError, match="foo") as info:
        Category.parse("foo")
    message = str(info.value).lower()
    for valid in ("conv", "gemm", "data_movement", "elementwise", "other"):
        assert valid in message


def test_an_unknown_custom_op_is_portable_and_unclassified() -> None:
    """A custom library's kernel ran outside the delegate; the table does not know it, so a report flags it."""
    op = classify("mylib::fused_thing.out")
    assert (op.kind, op.portable, op.known, op.category) == ("mylib::fused_thing", True, False, OTHER)
