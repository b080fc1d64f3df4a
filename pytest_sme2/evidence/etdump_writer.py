"""Synthetic ETDumps, written with ExecuTorch's own schema and serializer (flatcc), so tests and benchmarks
know every event time exactly. The reader (etdump.py) reads them like a runner's: size-prefixed."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SyntheticEvent:
    """An event to write: a runtime event (name) or a delegate op (delegate_name)."""

    start_ns: int
    end_ns: int
    name: str | None = None
    delegate_name: str | None = None
    instruction_id: int = -1


def write_synthetic_etdump(path: str | Path, blocks: list[tuple[str, list[SyntheticEvent]]]) -> Path:
    """Serialise blocks of events with executorch.devtools.etdump's schema and flatcc."""
    from executorch.devtools.etdump import schema_flatcc as s
    from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc

    run_data = []
    for block_name, events in blocks:
        run_data.append(
            s.RunData(
                name=block_name,
                bundled_input_index=-1,
                allocators=[],
                events=[
                    s.Event(
                        profile_event=s.ProfileEvent(
                            name=ev.name,
                            chain_index=0,
                            instruction_id=ev.instruction_id,
                            delegate_debug_id_int=-1,
                            delegate_debug_id_str=ev.delegate_name,
                            delegate_debug_metadata=None,
                            start_time=ev.start_ns,
                            end_time=ev.end_ns,
                        ),
                        allocation_event=None,
                        debug_event=None,
                    )
                    for ev in events
                ],
            )
        )
    data = serialize_to_etdump_flatcc(s.ETDumpFlatCC(version=0, run_data=run_data))
    path = Path(path)
    # The runtime writes size-prefixed ETDumps; so do we, so readers see one layout.
    path.write_bytes(struct.pack("<I", len(data)) + data)
    return path
