"""The runner's tensor file format, shared by inputs and outputs.

Repeated records of ``int32 dtype, int32 ndim, int64 sizes[ndim], int64 nbytes,
bytes`` (little-endian), where dtype is ExecuTorch's ScalarType code. Plain
enough to write from any language and to read back without torch.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from pytest_sme2.errors import RunnerError

# ExecuTorch ScalarType codes (c10 numbering) and their numpy equivalents.
SCALAR_TYPES: dict[int, np.dtype] = {
    0: np.dtype(np.uint8),
    1: np.dtype(np.int8),
    2: np.dtype(np.int16),
    3: np.dtype(np.int32),
    4: np.dtype(np.int64),
    5: np.dtype(np.float16),
    6: np.dtype(np.float32),
    7: np.dtype(np.float64),
    11: np.dtype(np.bool_),
}
_CODES = {dtype: code for code, dtype in SCALAR_TYPES.items()}


def write_tensors(path: Path, arrays: list[np.ndarray]) -> Path:
    with open(path, "wb") as out:
        for array in arrays:
            array = np.ascontiguousarray(array)
            code = _CODES.get(array.dtype)
            if code is None:
                raise RunnerError(f"cannot pass a {array.dtype} tensor to the native runner ({path})")
            data = array.tobytes()
            out.write(struct.pack("<ii", code, array.ndim))
            out.write(struct.pack(f"<{array.ndim}q", *array.shape))
            out.write(struct.pack("<q", len(data)))
            out.write(data)
    return path


def read_tensors(path: Path) -> list[np.ndarray]:
    data = Path(path).read_bytes()
    arrays, pos = [], 0
    try:
        while pos < len(data):
            code, ndim = struct.unpack_from("<ii", data, pos)
            shape = struct.unpack_from(f"<{ndim}q", data, pos + 8)
            (nbytes,) = struct.unpack_from("<q", data, pos + 8 + 8 * ndim)
            start = pos + 16 + 8 * ndim
            if start + nbytes > len(data) or code not in SCALAR_TYPES:
                raise struct.error("record runs past the end or has an unknown dtype")
            arrays.append(np.frombuffer(data[start : start + nbytes], dtype=SCALAR_TYPES[code]).reshape(shape))
            pos = start + nbytes
    except struct.error as exc:
        raise RunnerError(f"tensor file {path} is corrupt or truncated: {exc}") from None
    return arrays
