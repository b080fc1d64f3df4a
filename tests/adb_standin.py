"""A stand-in adb server with stand-in devices, on loopback, for testing the adb target.

It speaks the adb server's smart-socket protocol the way adbutils does
(host:version, host:devices(-l), host:tport:serial / host:transport,
host-serial:SERIAL:features|get-state|get-serialno, then shell:, shell,v2: and
sync: with STAT/STA2/LIST/SEND/RECV/QUIT), and runs device shell commands for
real with /bin/sh on this machine inside a private mount namespace
(``unshare --mount``, as root) in which each device's folder is bind-mounted on
/data/local/tmp and its own cpuinfo on /proc/cpuinfo. ``getprop`` answers from
the device's properties. So the adb target pushes the real runner, runs it and
pulls its ETDumps with the real adbutils client, and nothing of it is mocked.

Faults it can simulate: a device that goes offline (connections dropped,
processes killed, state reported as offline), hooks when a runner starts or
exits (to crash it or to lose its ETDump), several devices with different
serials, SME2 or no SME2 in /proc/cpuinfo, another ABI. It counts concurrent
runner processes per device, so tests can prove no two ran on one phone.

A test helper, not shipped. Every thread and process it starts ends at ``stop()``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

DEVICE_TMP = "/data/local/tmp"
SERVER_VERSION = 41
FEATURES = "shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir,apex,abb,fixed_push_symlink_timestamp,abb_exec"
# An arm64 device on this x86 machine: in a user namespace of its own, the shell mounts a private binfmt_misc
# (Linux 6.7+) that hands aarch64 programs to qemu-aarch64 (the emulated target's qemu 11.1, whose CPU has SME2
# when the device has it: QEMU_CPU), and empty folders over every aarch64 glibc of this machine, so a runner
# finds only what the adb target pushed. qemu logs the code it translates (QEMU_LOG=in_asm) for the tests.
_AARCH64_BINFMT = (
    r":standin-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:"
    r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:{qemu}:F"
)
AARCH64_GLIBC_DIRS = ("/usr/aarch64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
_EMULATED_SETUP = (
    'mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && printf "%s" "$STANDIN_BINFMT" > '
    '/proc/sys/fs/binfmt_misc/register && for d in $STANDIN_HIDE; do if [ -d "$d" ]; then '
    'mount -t tmpfs -o ro none "$d" || exit 1; fi; done'
)
# A device with sysfs=True reads its CPU frequencies, thermal zones and battery from files of its own, bind-mounted
# where a phone has them, and `dumpsys thermalservice` answers its thermal status (set_state() changes them).
_SYSFS_MOUNTS = (
    ("sys-cpu", "/sys/devices/system/cpu"),
    ("sys-thermal", "/sys/class/thermal"),
    ("sys-power", "/sys/class/power_supply"),
)
# Android 11+'s `cmd power set-fixed-performance-mode-enabled`: every call is appended to performance-mode.log.
_CMD = """#!/bin/sh
if [ "$1" = power ] && [ "$2" = set-fixed-performance-mode-enabled ] && [ "$3" = true -o "$3" = false ]; then
  echo "$3" >> {log}
else
  echo "cmd: Unknown command: $*" >&2; exit 255
fi
"""
_DUMPSYS = """#!/bin/sh
if [ "$1" = thermalservice ]; then echo "IsStatusOverride: false"; echo "Thermal Status: $(cat {status})"; fi
"""
_GETPROP = """#!/bin/sh
props={props}
if [ "$#" -eq 0 ]; then
  while IFS='=' read -r k v; do printf '[%s]: [%s]\\n' "$k" "$v"; done < "$props"
else
  while IFS='=' read -r k v; do if [ "$k" = "$1" ]; then printf '%s\\n' "$v"; fi; done < "$props"
fi
"""
# simpleperf on a stand-in device: records with this machine's Linux perf (real samples of the real runner)
# and reports them in simpleperf's report-sample text format. Addresses become vaddr_in_file through
# readelf's program headers, not through pytest-sme2's own ELF reader.
_SIMPLEPERF = r"""#!{python}
import os, re, subprocess, sys

args = sys.argv[1:]
if args[:1] == ["record"]:
    options, i = {{}}, 1
    while i < len(args) and args[i].startswith("-"):
        options[args[i]] = args[i + 1]
        i += 2
    if options.get("--clockid") != "monotonic":
        sys.exit("simpleperf stand-in: only --clockid monotonic is supported")
    os.execvp("perf", ["perf", "record", "--quiet", "-e", options["-e"], "-c", options["-c"], "-k", "CLOCK_MONOTONIC",
                       "-o", options["-o"], "--", *args[i:]])
if args[:1] != ["report-sample"]:
    sys.exit(f"simpleperf stand-in: unsupported command {{args[:1]}}")
data, out = args[args.index("-i") + 1], args[args.index("-o") + 1]
script = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,period,ip,sym,dso", "--ns",
                         "--show-mmap-events"], capture_output=True, text=True, check=True).stdout
maps, loads, lines = {{}}, {{}}, []
mmap = re.compile(r"PERF_RECORD_MMAP2? \d+/\d+: \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (?:0x)?([0-9a-f]+).*\]: \S+ (/\S+)$")
sample = re.compile(r"^\s*(\d+)\s+(\d+)\.(\d{{9}}):\s+(\d+)\s+([0-9a-f]+)\s+(.*?)\s+\((\S*)\)\s*$")


def vaddr_in_file(library, ip):
    for start, length, offset in reversed(maps.get(library, [])):
        if start <= ip < start + length:
            file_offset = ip - start + offset
            if library not in loads:
                headers = subprocess.run(["readelf", "-lW", library], capture_output=True, text=True).stdout
                loads[library] = [tuple(int(v, 16) for v in row.split()[1:3]) + (int(row.split()[4], 16),)
                                  for row in headers.splitlines() if row.split()[:1] == ["LOAD"]]
            for seg_offset, seg_vaddr, size in loads[library]:
                if seg_offset <= file_offset < seg_offset + size:
                    return file_offset - seg_offset + seg_vaddr
            return file_offset
    return ip


for line in script.splitlines():
    found = mmap.search(line)
    if found:
        start, length, offset, library = found.groups()
        maps.setdefault(library, []).append((int(start, 16), int(length, 16), int(offset, 16)))
        continue
    found = sample.match(line)
    if found:
        tid, seconds, nanos, period, ip, symbol, library = found.groups()
        lines += ["sample:", "  event_type: cpu-clock", f"  time: {{int(seconds) * 10**9 + int(nanos)}}",
                  f"  event_count: {{period}}", f"  thread_id: {{tid}}", "  thread_name: sme2_runner",
                  f"  vaddr_in_file: {{vaddr_in_file(library, int(ip, 16)):x}}", f"  file: {{library}}",
                  f"  symbol: {{'unknown' if symbol == '[unknown]' else symbol}}"]
with open(out, "w") as handle:
    handle.write("\n".join(lines) + "\n")
"""
_ARM_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"


def namespaces_available() -> str | None:
    """None when this machine can give shell commands a private /data/local/tmp, else why not."""
    if os.geteuid() != 0:
        return "the adb stand-in needs root for its mount namespace (unshare --mount)"
    if shutil.which("unshare") is None:
        return "the adb stand-in needs util-linux's unshare"
    try:
        os.makedirs(DEVICE_TMP, exist_ok=True)
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", f"mount --bind /tmp {DEVICE_TMP}"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the adb stand-in cannot make a mount namespace: {exc}"
    if probe.returncode != 0:
        return f"the adb stand-in cannot bind-mount in a mount namespace: {probe.stderr.decode(errors='replace')}"
    return None


@dataclass
class RunRecord:
    """One runner process on a stand-in device (a shell command with --model_path=)."""

    command: str
    started: float
    ended: float | None = None
    exit_code: int | None = None


@dataclass(eq=False)
class StandinDevice:
    serial: str
    home: Path  # holds the device's /data/local/tmp, cpuinfo and bin/
    model: str = "Standin Phone"
    soc: str = "Standin SoC 1"
    sme2: bool = False
    abi: str = "x86_64"
    android: str = "15"
    state: str = "device"
    transport_id: int = 1
    # Called in a thread right after a runner process starts, with the process.
    on_runner_start: Callable[["StandinDevice", subprocess.Popen], None] | None = None
    # Called after a runner process exits, before its exit code is sent.
    on_runner_exit: Callable[["StandinDevice"], None] | None = None
    # Called with every shell command before it runs (a test changing the device between two commands).
    on_shell: Callable[["StandinDevice", str], None] | None = None
    # An old adbd that leaves a shell command running when its connection closes.
    keeps_orphans: bool = False
    # A simpleperf on its PATH (Android 9+ ship one), backed by this machine's Linux perf.
    simpleperf: bool = False
    # An arm64 device: qemu-aarch64 (11.1, for SME2) runs its aarch64 programs, and no aarch64 glibc is visible
    # (_EMULATED_SETUP). Each program's translated code is logged to qemu_logs/qemu-PID.log.
    emulator: Path | None = None
    # Its own cpufreq, thermal and battery files and dumpsys (_SYSFS_MOUNTS); without it the device shows this
    # machine's /sys (a VM: no cpufreq, no thermal zone).
    sysfs: bool = False
    cores: int = 2
    runs: list[RunRecord] = field(default_factory=list)
    max_running: int = 0
    shell_commands: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    _running: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sockets: set = field(default_factory=set)
    _processes: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        features = _ARM_FEATURES + (" sme sme2 smei16i64 smef64f64" if self.sme2 else "")
        self.cpuinfo.write_text(
            "".join(
                f"processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
                f"CPU architecture: 8\nCPU part\t: 0xd85\n\n"
                for n in range(2)
            )
        )
        props = {
            "ro.product.model": self.model,
            "ro.product.manufacturer": "Standin",
            "ro.product.brand": "standin",
            "ro.soc.model": self.soc,
            "ro.soc.manufacturer": "Standin Silicon",
            "ro.board.platform": "standin",
            "ro.build.version.release": self.android,
            "ro.build.version.sdk": "35",
            "ro.product.cpu.abi": self.abi,
            "ro.product.cpu.abilist": self.abi,
            "ro.serialno": self.serial,
        }
        props_file = self.home / "build.prop"
        props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        getprop = self.bin_dir / "getprop"
        getprop.write_text(_GETPROP.format(props=_sh_quote(str(props_file))))
        getprop.chmod(0o755)
        cmd = self.bin_dir / "cmd"
        cmd.write_text(_CMD.format(log=_sh_quote(str(self.home / "performance-mode.log"))))
        cmd.chmod(0o755)
        if self.sysfs:
            self._make_sysfs()
        if self.simpleperf:
            import sys

            shim = self.bin_dir / "simpleperf"
            shim.write_text(_SIMPLEPERF.format(python=sys.executable))
            shim.chmod(0o755)

    @property
    def root(self) -> Path:
        return self.home / "data-local-tmp"

    @property
    def cpuinfo(self) -> Path:
        return self.home / "cpuinfo"

    @property
    def bin_dir(self) -> Path:
        return self.home / "bin"

    @property
    def performance_mode_calls(self) -> list[str]:
        """Each `cmd power set-fixed-performance-mode-enabled` value the device was given, in order."""
        log = self.home / "performance-mode.log"
        return log.read_text().split() if log.exists() else []

    @property
    def qemu_logs(self) -> Path:
        return self.home / "qemu-logs"

    def shell_argv(self, command: str) -> tuple[list[str], dict[str, str] | None]:
        """The command line (and environment) that runs a device shell command on this machine: a mount namespace
        with the device's own /data/local/tmp, /proc/cpuinfo (and sysfs files), its bin/ first on PATH."""
        mounts = [(self.root, DEVICE_TMP), (self.cpuinfo, "/proc/cpuinfo")]
        if self.sysfs:
            mounts += [(self.home / name, target) for name, target in _SYSFS_MOUNTS]
        args = [str(source) for source, _ in mounts]
        steps = [f'mount --bind "${{{i}}}" {target}' for i, (_, target) in enumerate(mounts, start=1)]
        unshare, env = ["unshare", "--mount", "--propagation", "private"], None
        if self.emulator is not None:
            self.qemu_logs.mkdir(exist_ok=True)
            cpu = "max,sme-default-vector-length=64" if self.sme2 else "max,sme=off"
            env = {
                **os.environ,
                "QEMU_CPU": cpu,
                "QEMU_LOG": "in_asm",
                "QEMU_LOG_FILENAME": str(self.qemu_logs / "qemu-%d.log"),
                "STANDIN_BINFMT": _AARCH64_BINFMT.format(qemu=self.emulator),
                "STANDIN_HIDE": " ".join(AARCH64_GLIBC_DIRS),
            }
            env.pop("QEMU_LD_PREFIX", None)
            unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
            steps.insert(0, _EMULATED_SETUP)
        n = len(args)
        steps.append(f'PATH="${{{n + 1}}}:$PATH" && export PATH && cd / && exec /bin/sh -c "${{{n + 2}}}"')
        return [*unshare, "/bin/sh", "-c", " && ".join(steps), "standin-sh", *args, str(self.bin_dir), command], env

    def _make_sysfs(self) -> None:
        for number in range(self.cores):
            folder = self.home / "sys-cpu" / f"cpu{number}" / "cpufreq"
            folder.mkdir(parents=True, exist_ok=True)
            for name, value in (
                ("scaling_governor", "schedutil"),
                ("scaling_cur_freq", "2000000"),
                ("scaling_max_freq", "3000000"),
                ("cpuinfo_max_freq", "3000000"),
            ):
                (folder / name).write_text(value + "\n")
        for number, kind in enumerate(("cpu-0-0", "soc")):
            zone = self.home / "sys-thermal" / f"thermal_zone{number}"
            zone.mkdir(parents=True, exist_ok=True)
            (zone / "type").write_text(kind + "\n")
            (zone / "temp").write_text("35000\n")
        battery = self.home / "sys-power" / "battery"
        battery.mkdir(parents=True, exist_ok=True)
        (battery / "temp").write_text("300\n")
        (battery / "status").write_text("Charging\n")
        (self.home / "thermal-status").write_text("0\n")
        dumpsys = self.bin_dir / "dumpsys"
        dumpsys.write_text(_DUMPSYS.format(status=_sh_quote(str(self.home / "thermal-status"))))
        dumpsys.chmod(0o755)

    def set_state(
        self,
        cap_khz: int | None = None,
        temp_c: float | None = None,
        thermal_status: int | None = None,
        governor: str | None = None,
    ) -> None:
        """Change what the device's sysfs and dumpsys say, as a phone heating or cooling would."""
        for number in range(self.cores):
            folder = self.home / "sys-cpu" / f"cpu{number}" / "cpufreq"
            if cap_khz is not None:
                (folder / "scaling_max_freq").write_text(f"{cap_khz}\n")
            if governor is not None:
                (folder / "scaling_governor").write_text(governor + "\n")
        if temp_c is not None:
            (self.home / "sys-thermal" / "thermal_zone0" / "temp").write_text(f"{int(temp_c * 1000)}\n")
        if thermal_status is not None:
            (self.home / "thermal-status").write_text(f"{thermal_status}\n")

    def host_path(self, device_path: str) -> Path | None:
        """Where a device path under /data/local/tmp lives on this machine; None elsewhere."""
        norm = posixpath.normpath(device_path)
        if norm == DEVICE_TMP:
            return self.root
        if norm.startswith(DEVICE_TMP + "/"):
            return self.root / norm[len(DEVICE_TMP) + 1 :]
        return None

    def drop(self) -> None:
        """Close every connection to this device and kill its processes (what unplugging does)."""
        with self._lock:
            sockets, processes = list(self._sockets), list(self._processes)
        for sock in sockets:
            _close(sock)
        for process in processes:
            _kill_group(process, signal.SIGKILL)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _kill_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _block(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return f"{len(data):04x}".encode() + data


class AdbStandin:
    """The stand-in adb server. Use as a context manager, or call ``stop()``."""

    def __init__(self, workdir: Path):
        reason = namespaces_available()
        if reason is not None:
            raise RuntimeError(reason)
        self.workdir = Path(workdir)
        self.devices: dict[str, StandinDevice] = {}
        self.requests: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._accepter = threading.Thread(target=self._accept_loop, name="adb-standin-accept", daemon=True)
        self._accepter.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_device(self, serial: str, **facts) -> StandinDevice:
        home = self.workdir / f"device-{len(self.devices)}"
        device = StandinDevice(serial=serial, home=home, transport_id=len(self.devices) + 1, **facts)
        self.devices[serial] = device
        return device

    def go_offline(self, serial: str) -> None:
        device = self.devices[serial]
        device.state = "offline"
        device.drop()

    def go_online(self, serial: str) -> None:
        self.devices[serial].state = "device"

    def stop(self) -> None:
        self._stopping.set()
        _close(self._listener)
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            _close(sock)
        for device in self.devices.values():
            device.drop()
        self._accepter.join(timeout=10)
        for thread in list(self._threads):
            thread.join(timeout=10)

    def __enter__(self) -> "AdbStandin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the host side of the protocol ---------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections.add(conn)
                self._threads = [t for t in self._threads if t.is_alive()]
                thread = threading.Thread(target=self._serve, args=(conn,), name="adb-standin-conn", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._dispatch(conn)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.discard(conn)
            _close(conn)

    @staticmethod
    def _read_request(conn: socket.socket) -> str | None:
        head = _recv_exact(conn, 4)
        if head is None:
            return None
        body = _recv_exact(conn, int(head, 16))
        return None if body is None else body.decode(errors="replace")

    @staticmethod
    def _fail(conn: socket.socket, message: str) -> None:
        conn.sendall(b"FAIL" + _block(message))

    def _device(self, conn: socket.socket, serial: str) -> StandinDevice | None:
        device = self.devices.get(serial)
        if device is None:
            self._fail(conn, f"device '{serial}' not found")
            return None
        if device.state != "device":
            self._fail(conn, f"device {device.state}")
            return None
        return device

    def _dispatch(self, conn: socket.socket) -> None:
        request = self._read_request(conn)
        if request is None:
            return
        self.requests.append(request)
        if request == "host:version":
            conn.sendall(b"OKAY" + _block(f"{SERVER_VERSION:04x}"))
        elif request in ("host:devices", "host:devices-l"):
            lines = []
            for d in self.devices.values():
                line = f"{d.serial}\t{d.state}"
                if request.endswith("-l"):
                    line = (
                        f"{d.serial:<22} {d.state} product:standin model:{d.model.replace(' ', '_')} "
                        f"device:standin transport_id:{d.transport_id}"
                    )
                lines.append(line + "\n")
            conn.sendall(b"OKAY" + _block("".join(lines)))
        elif request.startswith("host:tport:serial:") or request.startswith("host:transport:"):
            serial = request.split(":", 3)[-1] if request.startswith("host:tport:") else request.split(":", 2)[-1]
            device = self._device(conn, serial)
            if device is None:
                return
            conn.sendall(b"OKAY" + (struct.pack("<Q", device.transport_id) if "tport" in request else b""))
            service = self._read_request(conn)
            if service is not None:
                self._device_service(device, conn, service)
        elif request.startswith("host-serial:"):
            serial, _, command = request[len("host-serial:") :].rpartition(":")
            device = self.devices.get(serial)
            if device is None:
                self._fail(conn, f"device '{serial}' not found")
            elif command == "get-state":
                conn.sendall(b"OKAY" + _block(device.state))
            elif device.state != "device":
                self._fail(conn, f"device {device.state}")
            elif command == "features":
                conn.sendall(b"OKAY" + _block(FEATURES))
            elif command == "get-serialno":
                conn.sendall(b"OKAY" + _block(device.serial))
            else:
                self._fail(conn, f"unsupported host-serial service {command!r}")
        elif request == "host:kill":
            conn.sendall(b"OKAY")
        else:
            self._fail(conn, f"unknown host service {request!r}")

    # --- the device side -------------------------------------------------------------------------

    def _device_service(self, device: StandinDevice, conn: socket.socket, service: str) -> None:
        with device._lock:
            device._sockets.add(conn)
        try:
            if service.startswith("shell,v2:"):
                self._shell(device, conn, service[len("shell,v2:") :], v2=True)
            elif service.startswith("shell:"):
                self._shell(device, conn, service[len("shell:") :], v2=False)
            elif service == "sync:":
                conn.sendall(b"OKAY")
                _SyncSession(device, conn).serve()
            else:
                self._fail(conn, f"unsupported device service {service!r}")
        finally:
            with device._lock:
                device._sockets.discard(conn)

    def _shell(self, device: StandinDevice, conn: socket.socket, command: str, v2: bool) -> None:
        device.shell_commands.append(command)
        if device.on_shell is not None:
            device.on_shell(device, command)
        conn.sendall(b"OKAY")
        argv, env = device.shell_argv(command)
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if v2 else subprocess.STDOUT,
            start_new_session=True,
        )
        is_runner = "--model_path=" in command
        record = RunRecord(command, time.monotonic())
        with device._lock:
            device._processes.add(process)
            if is_runner:
                device._running += 1
                device.max_running = max(device.max_running, device._running)
                device.runs.append(record)
        if is_runner and device.on_runner_start is not None:
            threading.Thread(target=device.on_runner_start, args=(device, process), daemon=True).start()
        send_lock = threading.Lock()

        def pump(stream, kind: int) -> None:
            for chunk in iter(lambda: stream.read1(65536), b""):
                with send_lock:
                    try:
                        conn.sendall(struct.pack("<BI", kind, len(chunk)) + chunk if v2 else chunk)
                    except OSError:
                        pass

        def watch_client() -> None:  # like adbd: a closed shell socket ends the command
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            if process.poll() is None and not device.keeps_orphans:
                _kill_group(process, signal.SIGKILL)

        pumps = [threading.Thread(target=pump, args=(process.stdout, 1), daemon=True)]
        if v2:
            pumps.append(threading.Thread(target=pump, args=(process.stderr, 2), daemon=True))
        watcher = threading.Thread(target=watch_client, daemon=True)
        for thread in (*pumps, watcher):
            thread.start()
        code = process.wait()
        for thread in pumps:
            thread.join(timeout=10)
        exit_code = code if code >= 0 else 128 - code
        with device._lock:
            device._processes.discard(process)
            if is_runner:
                device._running -= 1
                record.ended, record.exit_code = time.monotonic(), exit_code
        if is_runner and device.on_runner_exit is not None:
            device.on_runner_exit(device)
        if v2:
            with send_lock:
                try:
                    conn.sendall(struct.pack("<BI", 3, 1) + bytes([exit_code & 0xFF]))
                except OSError:
                    pass
        _close(conn)
        watcher.join(timeout=10)


class _SyncSession:
    """The sync: service for one connection, on the device's folder."""

    def __init__(self, device: StandinDevice, conn: socket.socket):
        self.device, self.conn = device, conn

    def serve(self) -> None:
        while True:
            head = _recv_exact(self.conn, 8)
            if head is None:
                return
            command, length = head[:4], struct.unpack("<I", head[4:])[0]
            if command == b"QUIT":
                return
            body = _recv_exact(self.conn, length)
            if body is None:
                return
            path = body.decode(errors="replace")
            handler = {
                b"STAT": self.stat,
                b"STA2": self.stat2,
                b"LST2": self.stat2,
                b"LIST": self.list,
                b"SEND": self.send,
                b"RECV": self.recv,
            }.get(command)
            if handler is None:
                self._fail(f"unknown sync command {command!r}")
                return
            if handler(path) is False:
                return

    def _fail(self, message: str) -> None:
        data = message.encode()
        self.conn.sendall(b"FAIL" + struct.pack("<I", len(data)) + data)

    def _lstat(self, path: str) -> os.stat_result | None:
        local = self.device.host_path(path)
        try:
            return None if local is None else os.lstat(local)
        except OSError:
            return None

    def stat(self, path: str) -> None:
        st = self._lstat(path)
        values = (0, 0, 0) if st is None else (st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime))
        self.conn.sendall(b"STAT" + struct.pack("<III", *values))

    def stat2(self, path: str) -> None:
        st = self._lstat(path)
        if st is None:
            self.conn.sendall(b"STA2" + struct.pack("<IQQIIIIQqqq", 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            return
        self.conn.sendall(
            b"STA2"
            + struct.pack(
                "<IQQIIIIQqqq",
                0,
                st.st_dev,
                st.st_ino,
                st.st_mode,
                st.st_nlink,
                st.st_uid,
                st.st_gid,
                st.st_size,
                int(st.st_atime),
                int(st.st_mtime),
                int(st.st_ctime),
            )
        )

    def list(self, path: str) -> None:
        local = self.device.host_path(path)
        if local is not None and local.is_dir():
            for entry in sorted(local.iterdir()):
                st = entry.lstat()
                name = entry.name.encode()
                self.conn.sendall(
                    b"DENT"
                    + struct.pack("<IIII", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime), len(name))
                    + name
                )
        self.conn.sendall(b"DONE" + bytes(16))

    def send(self, spec: str) -> bool:
        path, _, mode_text = spec.rpartition(",")
        local = self.device.host_path(path)
        data = bytearray()
        while True:
            head = _recv_exact(self.conn, 8)
            if head is None:
                return False
            kind, value = head[:4], struct.unpack("<I", head[4:])[0]
            if kind == b"DATA":
                chunk = _recv_exact(self.conn, value)
                if chunk is None:
                    return False
                data += chunk
            elif kind == b"DONE":
                break
            else:
                self._fail(f"unexpected {kind!r} during SEND")
                return False
        if local is None:
            self._fail(f"remote couldn't create file {path}: Permission denied")
            return True
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            staging = local.with_name(local.name + ".standin-partial")
            staging.write_bytes(bytes(data))
            staging.chmod(int(mode_text) & 0o777 if mode_text.isdigit() else 0o644)  # adb sends decimal st_mode
            os.replace(staging, local)
        except OSError as exc:
            self._fail(f"remote couldn't create file {path}: {exc.strerror}")
            return True
        self.device.pushed.append(path)
        self.conn.sendall(b"OKAY" + bytes(4))
        return True

    def recv(self, path: str) -> None:
        local = self.device.host_path(path)
        if local is None or not local.is_file():
            self._fail(f"remote object '{path}' does not exist")
            return
        with open(local, "rb") as handle:
            for chunk in iter(lambda: handle.read(64 * 1024), b""):
                self.conn.sendall(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
        self.conn.sendall(b"DONE" + bytes(4))


def session_ini(standin: "AdbStandin", cache: Path, runs: int, warmup: int = 1) -> str:
    """A pytest.ini for an inner session on the stand-in: the bundled models, the shared export cache, this
    stand-in's adb server, ``runs`` timed runs after ``warmup``, no baselines."""
    models = Path(__file__).resolve().parent.parent / "models"
    return (
        "\n".join(
            [
                "[pytest]",
                f"sme2_model_dirs = {models}",
                f"sme2_cache_dir = {cache}",
                f"sme2_adb_server = {standin.address}",
                f"sme2_runs = {runs}",
                f"sme2_warmup = {warmup}",
                "filterwarnings = ignore",
                "sme2_baselines = false",
            ]
        )
        + "\n"
    )


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


__all__ = ["AdbStandin", "StandinDevice", "RunRecord", "namespaces_available", "wait_until", "DEVICE_TMP"]
