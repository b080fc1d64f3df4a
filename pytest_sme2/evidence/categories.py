"""The one operator-category table.

Every ETDump operator event is classified here and nowhere else. Names are
matched on the *operator kind* (the XNNPACK operator type before its format
list, or the ATen op name of a portable ``native_call_<op>.<overload>`` event),
never by substring: substring rules are how "Convert" became a convolution and
"Resize Bilinear" a GEMM in earlier scripts.

OTHER is never assigned to time directly by the Profile: it is E2E minus the
named categories, so shares always sum to one. Operators listed under OTHER
here (pooling, reductions, softmax, normalisation) are known and deliberately
not in a named category; names not in the table are OTHER too but flagged as
unclassified so a report can show them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Category(str, Enum):
    """Where operator time goes. Values are the names users pass to ``share()``."""

    CONV = "CONV"
    GEMM = "GEMM"
    DATA_MOVEMENT = "DATA_MOVEMENT"
    ELEMENTWISE = "ELEMENTWISE"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, name: "str | Category") -> "Category":
        """Accept ``"data_movement"``, ``"Data Movement"`` or a Category."""
        if isinstance(name, Category):
            return name
        key = re.sub(r"[\s\-]+", "_", str(name).strip()).upper()
        try:
            return cls(key)
        except ValueError:
            valid = ", ".join(c.value.lower() for c in cls)
            raise ValueError(f"unknown operator category {name!r}; valid categories: {valid}") from None


NAMED_CATEGORIES: tuple[Category, ...] = (
    Category.CONV,
    Category.GEMM,
    Category.DATA_MOVEMENT,
    Category.ELEMENTWISE,
)

# XNNPACK operator kinds: the part of the operator name before " (".
_XNNPACK_KINDS: dict[str, Category] = {
    # Convolutions, including depthwise (a "DWConv" suffix) and transposed.
    "Convolution": Category.CONV,
    "Deconvolution": Category.CONV,
    # Matrix multiplication. 1x1 convolutions are lowered to Fully Connected.
    "Fully Connected": Category.GEMM,
    "Dynamic Fully Connected": Category.GEMM,
    "Batch Matrix Multiply": Category.GEMM,
    # Data movement: layout changes, copies, dtype/quantisation conversion.
    "Transpose": Category.DATA_MOVEMENT,
    "Copy": Category.DATA_MOVEMENT,
    "Static Reshape": Category.DATA_MOVEMENT,
    "Reshape": Category.DATA_MOVEMENT,
    "Static Expand Dims": Category.DATA_MOVEMENT,
    "Expand Dims": Category.DATA_MOVEMENT,
    "Convert": Category.DATA_MOVEMENT,
    "Constant Pad": Category.DATA_MOVEMENT,
    "Static Constant Pad": Category.DATA_MOVEMENT,
    "Concatenate": Category.DATA_MOVEMENT,
    "Slice": Category.DATA_MOVEMENT,
    "Static Slice": Category.DATA_MOVEMENT,
    "Split": Category.DATA_MOVEMENT,
    "Even Split": Category.DATA_MOVEMENT,
    "Depth To Space": Category.DATA_MOVEMENT,
    "Space To Depth": Category.DATA_MOVEMENT,
    "Channel Shuffle": Category.DATA_MOVEMENT,
    # Elementwise arithmetic and activations.
    "Add": Category.ELEMENTWISE,
    "Subtract": Category.ELEMENTWISE,
    "Multiply": Category.ELEMENTWISE,
    "Divide": Category.ELEMENTWISE,
    "Maximum": Category.ELEMENTWISE,
    "Minimum": Category.ELEMENTWISE,
    "Squared Difference": Category.ELEMENTWISE,
    "Copysign": Category.ELEMENTWISE,
    "Clamp": Category.ELEMENTWISE,
    "HardSwish": Category.ELEMENTWISE,
    "Sigmoid": Category.ELEMENTWISE,
    "Tanh": Category.ELEMENTWISE,
    "ELU": Category.ELEMENTWISE,
    "GELU": Category.ELEMENTWISE,
    "Leaky ReLU": Category.ELEMENTWISE,
    "Negate": Category.ELEMENTWISE,
    "Square": Category.ELEMENTWISE,
    "Square Root": Category.ELEMENTWISE,
    "Reciprocal Square Root": Category.ELEMENTWISE,
    "Abs": Category.ELEMENTWISE,
    "Exp": Category.ELEMENTWISE,
    "Log": Category.ELEMENTWISE,
    "Floor": Category.ELEMENTWISE,
    "Ceiling": Category.ELEMENTWISE,
    "Bankers Rounding": Category.ELEMENTWISE,
    # XNNPACK names unary elementwise operators whose type has no string this
    # way (seen in int8 graphs); it is still a unary elementwise operator.
    "Invalid Unary Op": Category.ELEMENTWISE,
    # Known, deliberately not in a named category.
    "Max Pooling": Category.OTHER,
    "Average Pooling": Category.OTHER,
    "Global Average Pooling": Category.OTHER,
    "ArgMax Pooling": Category.OTHER,
    "Unpooling": Category.OTHER,
    "Mean": Category.OTHER,
    "Sum": Category.OTHER,
    "Softmax": Category.OTHER,
    "Resize Bilinear": Category.OTHER,
    "RoPE": Category.OTHER,
}

# Portable (non-delegated) ATen kernels: the op of ``native_call_<op>.<overload>``.
_ATEN_OPS: dict[str, Category] = {
    "convolution": Category.CONV,
    "convolution_backward": Category.CONV,
    "mm": Category.GEMM,
    "bmm": Category.GEMM,
    "addmm": Category.GEMM,
    "baddbmm": Category.GEMM,
    "linear": Category.GEMM,
    "matmul": Category.GEMM,
    "_to_dim_order_copy": Category.DATA_MOVEMENT,
    "_clone_dim_order": Category.DATA_MOVEMENT,
    "_to_copy": Category.DATA_MOVEMENT,
    "clone": Category.DATA_MOVEMENT,
    "copy": Category.DATA_MOVEMENT,
    "copy_": Category.DATA_MOVEMENT,
    "permute_copy": Category.DATA_MOVEMENT,
    "transpose_copy": Category.DATA_MOVEMENT,
    "t_copy": Category.DATA_MOVEMENT,
    "view_copy": Category.DATA_MOVEMENT,
    "_unsafe_view": Category.DATA_MOVEMENT,
    "expand_copy": Category.DATA_MOVEMENT,
    "select_copy": Category.DATA_MOVEMENT,
    "slice_copy": Category.DATA_MOVEMENT,
    "slice_scatter": Category.DATA_MOVEMENT,
    "split_copy": Category.DATA_MOVEMENT,
    "split_with_sizes_copy": Category.DATA_MOVEMENT,
    "unbind_copy": Category.DATA_MOVEMENT,
    "squeeze_copy": Category.DATA_MOVEMENT,
    "unsqueeze_copy": Category.DATA_MOVEMENT,
    "alias_copy": Category.DATA_MOVEMENT,
    "cat": Category.DATA_MOVEMENT,
    "stack": Category.DATA_MOVEMENT,
    "repeat": Category.DATA_MOVEMENT,
    "constant_pad_nd": Category.DATA_MOVEMENT,
    "pixel_shuffle": Category.DATA_MOVEMENT,
    "pixel_unshuffle": Category.DATA_MOVEMENT,
    "index": Category.DATA_MOVEMENT,
    # A KV cache written in place (the reference attention's cache update): moving keys and values.
    "index_put": Category.DATA_MOVEMENT,
    "index_put_": Category.DATA_MOVEMENT,
    "index_copy": Category.DATA_MOVEMENT,
    "index_select": Category.DATA_MOVEMENT,
    "gather": Category.DATA_MOVEMENT,
    "embedding": Category.DATA_MOVEMENT,
    "quantize_per_tensor": Category.DATA_MOVEMENT,
    "dequantize_per_tensor": Category.DATA_MOVEMENT,
    "quantize_per_channel": Category.DATA_MOVEMENT,
    "dequantize_per_channel": Category.DATA_MOVEMENT,
    "choose_qparams": Category.DATA_MOVEMENT,
    "add": Category.ELEMENTWISE,
    "sub": Category.ELEMENTWISE,
    "rsub": Category.ELEMENTWISE,
    "mul": Category.ELEMENTWISE,
    "div": Category.ELEMENTWISE,
    "pow": Category.ELEMENTWISE,
    "neg": Category.ELEMENTWISE,
    "abs": Category.ELEMENTWISE,
    "exp": Category.ELEMENTWISE,
    "log": Category.ELEMENTWISE,
    "sqrt": Category.ELEMENTWISE,
    "rsqrt": Category.ELEMENTWISE,
    "erf": Category.ELEMENTWISE,
    "relu": Category.ELEMENTWISE,
    "gelu": Category.ELEMENTWISE,
    "silu": Category.ELEMENTWISE,
    "sigmoid": Category.ELEMENTWISE,
    "tanh": Category.ELEMENTWISE,
    "hardswish": Category.ELEMENTWISE,
    "hardsigmoid": Category.ELEMENTWISE,
    "hardtanh": Category.ELEMENTWISE,
    "leaky_relu": Category.ELEMENTWISE,
    "clamp": Category.ELEMENTWISE,
    "maximum": Category.ELEMENTWISE,
    "minimum": Category.ELEMENTWISE,
    "where": Category.ELEMENTWISE,
    "masked_fill": Category.ELEMENTWISE,
    "eq": Category.ELEMENTWISE,
    "ne": Category.ELEMENTWISE,
    "lt": Category.ELEMENTWISE,
    "le": Category.ELEMENTWISE,
    "gt": Category.ELEMENTWISE,
    "ge": Category.ELEMENTWISE,
    "logical_not": Category.ELEMENTWISE,
    "logical_and": Category.ELEMENTWISE,
    "logical_or": Category.ELEMENTWISE,
    "bitwise_and": Category.ELEMENTWISE,
    "bitwise_or": Category.ELEMENTWISE,
    "bitwise_not": Category.ELEMENTWISE,
    "native_layer_norm": Category.OTHER,
    "native_group_norm": Category.OTHER,
    "_native_batch_norm_legit_no_training": Category.OTHER,
    "_softmax": Category.OTHER,
    "_log_softmax": Category.OTHER,
    "mean": Category.OTHER,
    "sum": Category.OTHER,
    "amax": Category.OTHER,
    "amin": Category.OTHER,
    "any": Category.OTHER,
    "all": Category.OTHER,
    "argmax": Category.OTHER,
    "cumsum": Category.OTHER,
    "max_pool2d_with_indices": Category.OTHER,
    "avg_pool2d": Category.OTHER,
    "upsample_bilinear2d": Category.OTHER,
    "upsample_nearest2d": Category.DATA_MOVEMENT,
    "full": Category.OTHER,
    "full_like": Category.OTHER,
    "scalar_tensor": Category.OTHER,
    "arange": Category.OTHER,
}

# Kernels of custom operator libraries, which the runtime names ``namespace::op.overload`` (not
# ``native_call_...``): ExecuTorch's LLM ops (kernel_libraries.py says where their kernels come from).
_CUSTOM_OPS: dict[str, Category] = {
    # Writing a step's keys and values into the KV cache: data movement, and in decode where time goes.
    "llama::update_cache": Category.DATA_MOVEMENT,
    "llama::update_cross_attn_cache": Category.DATA_MOVEMENT,
    # Attention: two batched matrix products around a softmax, outside XNNPACK (no SME kernel takes them).
    "llama::custom_sdpa": Category.GEMM,
    "llama::sdpa_with_kv_cache": Category.GEMM,
    "llama::custom_quantized_sdpa": Category.GEMM,
    "quantized_decomposed::quantize_per_tensor": Category.DATA_MOVEMENT,
    "quantized_decomposed::dequantize_per_tensor": Category.DATA_MOVEMENT,
    "quantized_decomposed::quantize_per_token": Category.DATA_MOVEMENT,
    "quantized_decomposed::dequantize_per_token": Category.DATA_MOVEMENT,
    "quantized_decomposed::choose_qparams_per_token_asymmetric": Category.DATA_MOVEMENT,
    "quantized_decomposed::embedding_byte": Category.DATA_MOVEMENT,
    "quantized_decomposed::embedding_4bit": Category.DATA_MOVEMENT,
}
_CUSTOM_NAME = re.compile(r"^(?P<kind>[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_]*)?$")

_PORTABLE_PREFIX = "native_call_"
# "Kind (FORMATS) kernel #N"; the format list and the kernel are optional.
_XNNPACK_NAME = re.compile(r"^(?P<kind>[^()]+?)\s*(?:\((?P<formats>[^)]*)\)\s*(?P<kernel>[^()]*))?$")
# XNNPACK formats of packed-LHS kernels that exist only for SME/SME2
# (KleidiAI): PF32, PF16, PQS8 ... See FACTS: "How SME2 shows in an ETDump".
# Not QP8: the packed-activation int8 dynamic GEMM ("QP8, F32, QC8W") has
# NEON (dotprod/i8mm) kernels too and shows the same name with SME off
# (seen under qemu -cpu max,sme=off), so its name proves nothing about SME.
_PACKED_FORMAT = re.compile(r"^P(?:F|QS|QU|QD)\d+$")
_INSTANCE_SUFFIX = re.compile(r"\s*#\d+$")


@dataclass(frozen=True)
class OpClass:
    """What the table knows about one operator event name."""

    kind: str  # "Convolution", "native_layer_norm", ...
    category: Category
    formats: tuple[str, ...]  # ("NHWC", "PF32") for XNNPACK ops, () for portable ops
    kernel: str  # "IGEMM", "DWConv", "GEMM", "" ...
    portable: bool  # a native_call_* kernel outside any delegate
    packed: bool  # runs a packed-format (SME/SME2) kernel
    known: bool  # the kind is in the table (False means OTHER by default)


def strip_instance(name: str) -> str:
    """Drop XNNPACK's per-delegate " #N" suffix so instances of one op kind group."""
    return _INSTANCE_SUFFIX.sub("", name)


def classify(name: str) -> OpClass:
    """Classify one operator event name from an ETDump."""
    if name.startswith(_PORTABLE_PREFIX):
        op = name[len(_PORTABLE_PREFIX) :].split(".", 1)[0]
        category = _ATEN_OPS.get(op)
        return OpClass(op, category or Category.OTHER, (), "", True, False, category is not None)
    custom = _CUSTOM_NAME.match(name.strip())
    if custom:  # a custom library's kernel, outside any delegate like a portable one
        category = _CUSTOM_OPS.get(custom["kind"])
        return OpClass(custom["kind"], category or Category.OTHER, (), "", True, False, category is not None)
    match = _XNNPACK_NAME.match(strip_instance(name.strip()))
    if not match:
        return OpClass(name, Category.OTHER, (), "", False, False, False)
    kind = match["kind"].strip()
    formats = tuple(f.strip() for f in (match["formats"] or "").split(",") if f.strip())
    category = _XNNPACK_KINDS.get(kind)
    packed = any(_PACKED_FORMAT.match(f) for f in formats)
    return OpClass(
        kind, category or Category.OTHER, formats, (match["kernel"] or "").strip(), False, packed, category is not None
    )
