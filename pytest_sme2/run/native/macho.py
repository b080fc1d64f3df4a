"""Just enough Mach-O reading to check what the macOS masking library relies on.

``sme2_mask_macos.c`` hides SME from XNNPACK's cpuinfo by interposing
``sysctlbyname``. That only works while the library holding cpuinfo imports
``_sysctlbyname`` (an undefined external symbol dyld binds, so an interposer sees
the calls) and while cpuinfo asks for names the interposer answers. Both can be
read from the macOS wheel's dylibs on any machine: the imports from LC_SYMTAB,
the queried names from the C strings in ``__TEXT,__cstring``. No ``otool`` or
``nm`` needed, so the contract test runs on Linux CI.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_MH_MAGIC_64 = 0xFEEDFACF
_FAT_MAGIC, _FAT_MAGIC_64 = 0xCAFEBABE, 0xCAFEBABF
_CPU_TYPES = {0x0100000C: "arm64", 0x01000007: "x86_64"}
_LC_SEGMENT_64, _LC_SYMTAB = 0x19, 0x2
_LC_LOAD_DYLIBS = (0xC, 0x80000018, 0x8000001F)  # LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB
_N_EXT, _N_TYPE, _N_UNDF, _N_STAB = 0x01, 0x0E, 0x0, 0xE0


class MachOError(ValueError):
    """The file is not a 64-bit Mach-O (or a fat file holding one) this reader understands."""


@dataclass(frozen=True)
class Section:
    segment: str
    name: str
    offset: int  # in the file (relative to the slice)
    size: int


@dataclass(frozen=True)
class MachO:
    """One 64-bit slice: its CPU, the libraries it loads, sections, and symbols it imports and defines."""

    path: Path
    cpu: str
    dylibs: tuple[str, ...]  # install names, e.g. "@rpath/libexecutorch_threadpool.dylib"
    sections: tuple[Section, ...]
    imports: frozenset[str]
    exports: frozenset[str]
    _data: bytes

    def section(self, segment: str, name: str) -> bytes:
        """The bytes of ``segment,name``; empty if the file has no such section."""
        for section in self.sections:
            if section.segment == segment and section.name == name:
                return self._data[section.offset : section.offset + section.size]
        return b""

    def cstrings(self) -> tuple[str, ...]:
        """The NUL-terminated literals of ``__TEXT,__cstring`` (where C string constants such as sysctl names live)."""
        raw = self.section("__TEXT", "__cstring")
        return tuple(part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part)


def _name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")


def _slice(data: bytes, path: Path, cpu: str) -> bytes:
    """The thin Mach-O inside ``data``: ``data`` itself, or the ``cpu`` slice of a fat (universal) file."""
    (magic_be,) = struct.unpack_from(">I", data, 0)
    if magic_be not in (_FAT_MAGIC, _FAT_MAGIC_64):
        return data
    (count,) = struct.unpack_from(">I", data, 4)
    wide = magic_be == _FAT_MAGIC_64
    for index in range(count):
        if wide:
            cputype, _sub, offset, size, _align, _reserved = struct.unpack_from(">iiQQII", data, 8 + index * 32)
        else:
            cputype, _sub, offset, size, _align = struct.unpack_from(">iiIII", data, 8 + index * 20)
        if _CPU_TYPES.get(cputype & 0xFFFFFFFF) == cpu:
            return data[offset : offset + size]
    raise MachOError(f"{path} is a universal Mach-O without an {cpu} slice")


def read_macho(path: Path, cpu: str = "arm64") -> MachO:
    """Parse ``path`` (thin, or the ``cpu`` slice of a fat file). Raises MachOError for anything else."""
    path = Path(path)
    whole = path.read_bytes()
    if len(whole) < 32:
        raise MachOError(f"{path} is too short to be a Mach-O file")
    data = _slice(whole, path, cpu)
    magic, cputype, _sub, _filetype, ncmds, _sizeofcmds, _flags, _reserved = struct.unpack_from("<IiiIIIII", data, 0)
    if magic != _MH_MAGIC_64:
        raise MachOError(f"{path} is not a little-endian 64-bit Mach-O file (magic {magic:#x})")
    sections: list[Section] = []
    dylibs: list[str] = []
    symtab: tuple[int, int, int, int] | None = None
    at = 32
    for _ in range(ncmds):
        command, size = struct.unpack_from("<II", data, at)
        if size < 8 or at + size > len(data):
            raise MachOError(f"{path}: load command at offset {at} has an impossible size {size}")
        if command == _LC_SEGMENT_64:
            (nsects,) = struct.unpack_from("<I", data, at + 64)
            for index in range(nsects):
                base = at + 72 + index * 80
                sectname, segname = _name(data[base : base + 16]), _name(data[base + 16 : base + 32])
                _addr, sect_size, offset = struct.unpack_from("<QQI", data, base + 32)
                sections.append(Section(segname, sectname, offset, sect_size))
        elif command in _LC_LOAD_DYLIBS:
            (name_offset,) = struct.unpack_from("<I", data, at + 8)
            dylibs.append(_name(data[at + name_offset : at + size]))
        elif command == _LC_SYMTAB:
            symtab = struct.unpack_from("<IIII", data, at + 8)
        at += size
    imports: set[str] = set()
    exports: set[str] = set()
    if symtab is not None:
        symoff, nsyms, stroff, strsize = symtab
        strings = data[stroff : stroff + strsize]
        for index in range(nsyms):
            strx, n_type, _sect, _desc, _value = struct.unpack_from("<IBBHQ", data, symoff + index * 16)
            if n_type & _N_STAB or not n_type & _N_EXT:
                continue
            name = _name(strings[strx : strx + 1024])
            (imports if n_type & _N_TYPE == _N_UNDF else exports).add(name)
    return MachO(
        path,
        _CPU_TYPES.get(cputype & 0xFFFFFFFF, f"cputype {cputype:#x}"),
        tuple(dylibs),
        tuple(sections),
        frozenset(imports),
        frozenset(exports),
        data,
    )
