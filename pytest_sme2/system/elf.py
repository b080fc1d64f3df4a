"""Just enough ELF reading to ship a runner to another machine.

Which CPU architecture an executable is for (to refuse a wrong-architecture
runner before anything runs), and which of its shared libraries are not part
of the system (to push them alongside it to a device). Read from the file
itself, so no ``readelf`` is needed on macOS or on a CI machine without
binutils.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

_ELF_MACHINES = {62: "x86_64", 183: "aarch64", 40: "arm", 3: "i386"}
_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29
_SHT_SYMTAB, _SHT_DYNSYM, _STT_FUNC = 2, 11, 2
_PT_GNU_EH_FRAME = 0x6474E550


def executable_arch(path: Path) -> str | None:
    """CPU architecture an ELF executable is built for; None if not ELF (e.g. Mach-O or a script)."""
    with open(path, "rb") as handle:
        header = handle.read(20)
    if header[:4] != b"\x7fELF" or len(header) < 20:
        return None
    little = header[5] == 1
    machine = int.from_bytes(header[18:20], "little" if little else "big")
    return _ELF_MACHINES.get(machine, f"ELF machine {machine}")


@dataclass(frozen=True)
class DynamicSection:
    """The dynamic-linking facts of one ELF file."""

    needed: tuple[str, ...]
    search_path: tuple[str, ...]  # RUNPATH, else RPATH, with $ORIGIN still in it


def _segments(data: bytes) -> tuple[bool, str, list[tuple[int, int, int, int]]] | None:
    """(64-bit?, struct byte order, every program header as (type, vaddr, offset, filesz)); None if not ELF."""
    if data[:4] != b"\x7fELF" or len(data) < 52:
        return None
    wide = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if wide:
        (phoff,) = struct.unpack_from(end + "Q", data, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 54)
    else:
        (phoff,) = struct.unpack_from(end + "I", data, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 42)
    found = []
    for index in range(phnum):
        at = phoff + index * phentsize
        if wide:
            p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(end + "IIQQQQ", data, at)
        else:
            p_type, offset, vaddr, _paddr, filesz = struct.unpack_from(end + "IIIII", data, at)
        found.append((p_type, vaddr, offset, filesz))
    return wide, end, found


def _loads(segments: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
    """The PT_LOAD segments as (vaddr, offset, filesz)."""
    return [(vaddr, offset, size) for kind, vaddr, offset, size in segments if kind == _PT_LOAD]


def _file_offset_of(loads: "list[tuple[int, int, int]] | tuple[tuple[int, int, int], ...]", vaddr: int) -> int | None:
    """Where the byte at virtual address ``vaddr`` is in the file (None: no loaded segment holds it)."""
    return next((vaddr - va + off for va, off, size in loads if va <= vaddr < va + size), None)


def _vaddr_of(loads: "list[tuple[int, int, int]] | tuple[tuple[int, int, int], ...]", offset: int) -> int | None:
    """The virtual address the file's byte at ``offset`` is loaded at (None: outside every loaded segment)."""
    return next((offset - off + va for va, off, size in loads if off <= offset < off + size), None)


def _program_headers(data: bytes) -> tuple[bool, str, list[tuple[int, int, int]], tuple[int, int] | None] | None:
    """(64-bit?, struct byte order, PT_LOAD (vaddr, offset, filesz) list, PT_DYNAMIC (offset, size)); None if not
    ELF."""
    headers = _segments(data)
    if headers is None:
        return None
    wide, end, segments = headers
    loads = _loads(segments)
    dynamic = next(((offset, size) for kind, _vaddr, offset, size in segments if kind == _PT_DYNAMIC), None)
    return wide, end, loads, dynamic


@dataclass(frozen=True)
class FunctionSymbols:
    """The function symbols of one ELF file, to name the code at an address (kernel traces)."""

    starts: tuple[int, ...]  # sorted virtual addresses
    ends: tuple[int, ...]
    names: tuple[str, ...]
    loads: tuple[tuple[int, int, int], ...]  # PT_LOAD (vaddr, offset, filesz)

    def vaddr_at(self, offset: int) -> int | None:
        """The virtual address of the file's byte at ``offset`` (None: not in a loaded segment)."""
        return _vaddr_of(self.loads, offset)

    def at_file_offset(self, offset: int) -> str | None:
        """The function whose code lies at ``offset`` in the file (None: no symbol covers it)."""
        vaddr = self.vaddr_at(offset)
        return None if vaddr is None else self.at_vaddr(vaddr)

    def at_vaddr(self, vaddr: int) -> str | None:
        """The function whose code lies at the virtual address ``vaddr`` (None: no symbol covers it)."""
        index = bisect.bisect_right(self.starts, vaddr) - 1
        if index >= 0 and vaddr < self.ends[index]:
            return self.names[index]
        return None


def function_symbols(path: Path) -> FunctionSymbols:
    """STT_FUNC symbols from .symtab and .dynsym (exported kernels are in .dynsym of a stripped library)."""
    data = Path(path).read_bytes()
    headers = _program_headers(data)
    if headers is None:
        return FunctionSymbols((), (), (), ())
    wide, end, loads, _dynamic = headers
    if wide:
        (shoff,) = struct.unpack_from(end + "Q", data, 40)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 58)
        section = struct.Struct(end + "IIQQQQIIQQ")
        symbol = struct.Struct(end + "IBBHQQ")
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 32)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 46)
        section = struct.Struct(end + "IIIIIIIIII")
        symbol = struct.Struct(end + "IIIBBH")
    sections = [section.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[int, tuple[int, str]] = {}
    for sh in sections:
        sh_type, sh_offset, sh_size, sh_link = sh[1], sh[4], sh[5], sh[6]
        if sh_type not in (_SHT_SYMTAB, _SHT_DYNSYM):
            continue
        strtab = sections[sh_link][4]
        for at in range(sh_offset, sh_offset + sh_size, symbol.size):
            fields = symbol.unpack_from(data, at)
            if wide:
                name, info, _other, shndx, value, size = fields
            else:
                name, value, size, info, _other, shndx = fields
            if info & 0xF != _STT_FUNC or shndx == 0 or value == 0:
                continue
            text = data[strtab + name : data.index(b"\0", strtab + name)].decode(errors="replace")
            if value not in found or size > found[value][0]:
                found[value] = (max(size, 1), text)
    ordered = sorted(found.items())
    return FunctionSymbols(
        tuple(v for v, _ in ordered),
        tuple(v + s for v, (s, _) in ordered),
        tuple(n for _, (_, n) in ordered),
        tuple(loads),
    )


def unwind_function_ranges(path: Path) -> list[tuple[int, int]]:
    """Every function's (start, end) virtual addresses from the unwind tables (.eh_frame_hdr, .eh_frame).

    Why: a stripped library keeps no symbol for most of its code (the executorch
    x86_64 wheel names none of the f32 XNNPACK kernels mobilenet runs), but the
    unwinder needs every function's bounds, so they are there even without symbols.
    A sampled address can then be named by its library and function range, stable
    for a given build. Empty when the file has no unwind table.
    """
    data = Path(path).read_bytes()
    headers = _segments(data)
    if headers is None:
        return []
    wide, end, segments = headers
    loads = _loads(segments)
    hdr = next(((vaddr, offset) for kind, vaddr, offset, _size in segments if kind == _PT_GNU_EH_FRAME), None)
    if hdr is None or data[hdr[1]] != 1:
        return []

    reader = _EncodedReader(data, end, wide, hdr[0], hdr[1])
    ptr_enc, count_enc, table_enc = data[hdr[1] + 1], data[hdr[1] + 2], data[hdr[1] + 3]
    at = hdr[1] + 4
    _eh_frame, at = reader.read(at, ptr_enc)
    count, at = reader.read(at, count_enc)
    cie_encoding: dict[int, int] = {}
    ranges = []
    for _ in range(count or 0):
        start, at = reader.read_present(at, table_enc)
        fde_vaddr, at = reader.read_present(at, table_enc)
        fde = _file_offset_of(loads, fde_vaddr)
        if fde is None:
            raise ValueError(f"{path}: .eh_frame_hdr points outside the loaded segments ({fde_vaddr:#x})")
        header = 12 if struct.unpack_from(end + "I", data, fde)[0] == 0xFFFFFFFF else 4
        cie_pointer_at = fde + header
        cie = cie_pointer_at - struct.unpack_from(end + ("Q" if header == 12 else "I"), data, cie_pointer_at)[0]
        if cie not in cie_encoding:
            cie_encoding[cie] = _cie_pointer_encoding(reader, cie)
        pc_at = cie_pointer_at + (8 if header == 12 else 4)
        _begin, pc_at = reader.read(pc_at, cie_encoding[cie])
        length, _ = reader.read_present(pc_at, cie_encoding[cie] & 0x0F)  # the range is a plain number
        ranges.append((start, start + length))
    return sorted(ranges)


class _EncodedReader:
    """Reads DWARF exception-header pointers (DW_EH_PE_*): a format and what the value is relative to."""

    def __init__(self, data: bytes, end: str, wide: bool, hdr_vaddr: int, hdr_offset: int):
        self.data, self.end, self.wide = data, end, wide
        self.hdr_vaddr, self.hdr_offset = hdr_vaddr, hdr_offset

    def read_present(self, at: int, encoding: int) -> tuple[int, int]:
        """A field the table cannot omit (a table entry, a range length): DW_EH_PE_omit there is a corrupt file."""
        value, after = self.read(at, encoding)
        if value is None:
            raise ValueError(f".eh_frame_hdr: a required field at offset {at:#x} is encoded as omitted (0xff)")
        return value, after

    def read(self, at: int, encoding: int) -> tuple[int | None, int]:
        if encoding == 0xFF:  # DW_EH_PE_omit
            return None, at
        fmt = encoding & 0x0F
        if fmt in (0x01, 0x09):
            value, after = _leb128(self.data, at, signed=fmt == 0x09)
        else:
            code = {0x00: "Q" if self.wide else "I", 0x02: "H", 0x03: "I", 0x04: "Q", 0x0A: "h", 0x0B: "i", 0x0C: "q"}[
                fmt
            ]
            value = struct.unpack_from(self.end + code, self.data, at)[0]
            after = at + struct.calcsize(code)
        base = {
            0x00: 0,
            0x10: self.hdr_vaddr + (at - self.hdr_offset),  # pcrel: the field's own address
            0x30: self.hdr_vaddr,
        }[encoding & 0x70]  # datarel: .eh_frame_hdr's address
        return base + value, after


def _leb128(data: bytes, at: int, signed: bool) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if signed and byte & 0x40:
        value -= 1 << shift
    return value, at


def _cie_pointer_encoding(reader: _EncodedReader, cie: int) -> int:
    """The FDE pointer encoding a CIE declares (augmentation 'R'); absptr when it declares none."""
    data, end = reader.data, reader.end
    at = cie + (12 if struct.unpack_from(end + "I", data, cie)[0] == 0xFFFFFFFF else 4) + 4  # length, CIE id
    version = data[at]
    at += 1
    augmentation = data[at : data.index(b"\0", at)].decode()
    at += len(augmentation) + 1
    _, at = _leb128(data, at, signed=False)  # code alignment
    _, at = _leb128(data, at, signed=True)  # data alignment
    if version == 1:
        at += 1
    else:
        _, at = _leb128(data, at, signed=False)  # return address register
    if not augmentation.startswith("z"):
        return 0x00
    _, at = _leb128(data, at, signed=False)  # augmentation data length
    for letter in augmentation[1:]:
        if letter == "R":
            return data[at]
        if letter == "L":
            at += 1
        elif letter == "P":  # the personality routine's pointer: skipped, its format read like any other
            _, at = reader.read(at + 1, data[at] & 0x0F)
    return 0x00


def program_interpreter(path: Path) -> str | None:
    """The dynamic loader an ELF executable names (PT_INTERP), e.g. ``/lib/ld-linux-aarch64.so.1`` for a glibc
    program or ``/system/bin/linker64`` for an Android one; None for a static program, a library or a non-ELF file."""
    data = Path(path).read_bytes()
    headers = _segments(data)
    if headers is None:
        return None
    interp = next(((offset, size) for kind, _vaddr, offset, size in headers[2] if kind == _PT_INTERP), None)
    if interp is None:
        return None
    return data[interp[0] : interp[0] + interp[1]].split(b"\0", 1)[0].decode(errors="replace") or None


def read_dynamic(path: Path) -> DynamicSection:
    """DT_NEEDED and RUNPATH/RPATH of an ELF file (empty for static or non-ELF files)."""
    data = Path(path).read_bytes()
    headers = _program_headers(data)
    if headers is None:
        return DynamicSection((), ())
    wide, end, loads, dynamic = headers
    if dynamic is None:
        return DynamicSection((), ())
    entry = struct.Struct(end + ("qQ" if wide else "iI"))
    entries: list[tuple[int, int]] = []
    for at in range(dynamic[0], dynamic[0] + dynamic[1], entry.size):
        tag, value = entry.unpack_from(data, at)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab_vaddr = next((value for tag, value in entries if tag == _DT_STRTAB), None)
    if strtab_vaddr is None:
        return DynamicSection((), ())
    strtab = _file_offset_of(loads, strtab_vaddr)
    if strtab is None:
        strtab = strtab_vaddr

    def string(offset: int) -> str:
        start = strtab + offset
        return data[start : data.index(b"\0", start)].decode(errors="replace")

    needed = tuple(string(value) for tag, value in entries if tag == _DT_NEEDED)
    runpath = [string(value) for tag, value in entries if tag == _DT_RUNPATH]
    rpath = [string(value) for tag, value in entries if tag == _DT_RPATH]
    paths = (runpath or rpath or [""])[0]
    return DynamicSection(needed, tuple(p for p in paths.split(":") if p))


def bundled_libraries(binary: Path) -> dict[str, Path]:
    """The shared libraries a binary needs that are not system libraries, by the name it asks for.

    A library counts as bundled when it is found through the binary's (or the
    needing library's) RUNPATH/RPATH, ``$ORIGIN`` expanded, or next to the
    binary, the way Android builds ship their .so files. Anything else (libc,
    libm, libstdc++, liblog, ...) is left to the device. Followed transitively.
    """
    binary = Path(binary)
    found: dict[str, Path] = {}
    pending = [binary]
    while pending:
        current = pending.pop()
        section = read_dynamic(current)
        origin = str(current.resolve().parent)
        directories = [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for p in section.search_path]
        directories.append(str(binary.parent))
        for name in section.needed:
            if name in found:
                continue
            for directory in directories:
                candidate = Path(directory) / name
                if candidate.is_file() and os.access(candidate, os.R_OK):
                    found[name] = candidate.resolve()
                    pending.append(found[name])
                    break
    return found
