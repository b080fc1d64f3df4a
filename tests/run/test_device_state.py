"""Device state recorded and guarded (issue 27, item 2): governors, frequency caps, temperatures and thermal
status read before and after every chunk; throttled chunks left out like stalls; cooldown before runs.

Unit tests read hand-written sysfs text; the end-to-end tests run the real runner on stand-in devices whose
sysfs files and dumpsys the test changes while the runner runs, as a phone heating up would.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from adb_standin import AdbStandin, StandinDevice, namespaces_available
from helpers_versions import needs_runtime_libraries

from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.report.text import device_state_text, disturbed_text, profile_text
from pytest_sme2.run.device_state import Clock, DeviceState, cores_of_mask, wait_for_cooldown
from pytest_sme2.run.targets import RunSpec

# The runner links the wheel's C++ runtime libraries: on executorch 1.4.1 (none) every test here skips, naming why.
pytestmark = needs_runtime_libraries

SYSFS = """cpu0.scaling_governor=schedutil
cpu0.scaling_cur_freq=1200000
cpu0.scaling_max_freq=3000000
cpu0.cpuinfo_max_freq=3000000
cpu4.scaling_governor=performance
cpu4.scaling_cur_freq=
cpu4.scaling_max_freq=4000000
cpu4.cpuinfo_max_freq=4210000
zone0.type=cpu-big
zone0.temp=41500
zone1.type=cpu-big
zone1.temp=39000
zone2.temp=not-a-number
battery.temp=315
battery.status=Discharging
thermal.status=1
garbage line
"""


def test_parse_reads_every_field_and_keeps_repeated_zone_names() -> None:
    state = DeviceState.parse(SYSFS)
    assert state.cores[0].governor == "schedutil" and state.cores[0].cur_khz == 1_200_000
    assert state.cores[4].cur_khz is None and state.cores[4].max_khz == 4_000_000
    assert state.cores[4].hw_max_khz == 4_210_000
    assert state.zones == {"cpu-big": 41.5, "cpu-big'": 39.0}
    assert state.hottest_c == 41.5 and state.thermal_status == 1
    assert state.battery_temp_c == 31.5 and state.battery_status == "Discharging"
    assert state.governor() == "mixed" and state.governor([4]) == "performance" and state.governor([7]) is None
    assert state.missing() == []
    assert DeviceState.parse("").missing() == [
        "CPU frequencies (no readable cpufreq)",
        "temperatures (no readable thermal zone)",
    ]


def test_throttling_is_a_lowered_cap_or_moderate_thermal_status() -> None:
    steady = DeviceState.parse(SYSFS)
    assert steady.throttling(steady) is None
    # An idle core clocking down is not throttling: only the cap counts.
    assert (
        DeviceState.parse(SYSFS.replace("cpu0.scaling_cur_freq=1200000", "cpu0.scaling_cur_freq=300000")).throttling(
            steady
        )
        is None
    )
    capped = DeviceState.parse(SYSFS.replace("cpu4.scaling_max_freq=4000000", "cpu4.scaling_max_freq=3000000"))
    assert capped.throttling(steady) == "cpu4 capped at 3.00 GHz (was 4.00)"
    assert capped.throttling(steady, cores=[0]) is None  # the capped core is not one the runner may use
    # 3.84 GHz is 96% of 4.0: one frequency step at most, not throttling.
    assert (
        DeviceState.parse(SYSFS.replace("cpu4.scaling_max_freq=4000000", "cpu4.scaling_max_freq=3840000")).throttling(
            steady
        )
        is None
    )
    moderate = DeviceState.parse(SYSFS.replace("thermal.status=1", "thermal.status=2"))
    assert moderate.throttling(steady) == "thermal status moderate (2)"
    assert moderate.hot(60.0) == "thermal status moderate"
    assert steady.hot(40.0) == "cpu-big at 41.5 C (above 40 C)" and steady.hot(41.5) is None


def test_cores_of_mask() -> None:
    assert cores_of_mask("f0") == [4, 5, 6, 7] and cores_of_mask("1") == [0] and cores_of_mask(None) is None


def test_cooldown_waits_while_hot_and_gives_up_at_the_limit() -> None:
    clock = [0.0]
    temps = iter([60.0, 55.0, 44.0, 44.0])
    said: list[str] = []

    def read() -> DeviceState:
        return DeviceState(zones={"soc": next(temps)})

    state, waited, still_hot = wait_for_cooldown(
        read, 45.0, 300.0, said.append, Clock(lambda s: clock.__setitem__(0, clock[0] + s), lambda: clock[0])
    )
    assert still_hot is None and state.hottest_c == 44.0 and waited == 10.0
    assert said == [
        "sme2: cooling down: soc at 60.0 C (above 45 C); waited 0 of 300 s",
        "sme2: cooling down: soc at 55.0 C (above 45 C); waited 5 of 300 s",
    ]
    clock[0] = 0.0
    state, waited, still_hot = wait_for_cooldown(
        lambda: DeviceState(zones={"soc": 70.0}),
        45.0,
        12.0,
        said.append,
        Clock(lambda s: clock.__setitem__(0, clock[0] + s), lambda: clock[0]),
    )
    assert still_hot == "soc at 70.0 C (above 45 C)" and waited == 12.0


pytestmark_e2e = pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[AdbStandin]:
    with AdbStandin(tmp_path / "standin") as server:
        yield server


def _session(standin: AdbStandin, serial: str, tmp_path: Path, **settings) -> Sme2Session:
    return Sme2Session(
        Settings(
            target=f"adb:{serial}",
            cache_dir=tmp_path / "cache",
            session_dir=tmp_path / "art",
            target_options={"adb_server": standin.address},
            **settings,
        )
    )


def change_state_at_reads(device: StandinDevice, changes: dict[int, dict]) -> None:
    """The stand-in device changes its state at the n-th state read (a shell command reading the governor):
    ``changes[n]`` are set_state's arguments. What drives throttling and cooldown without racing a timer."""
    reads = [0]

    def on_shell(dev: StandinDevice, command: str) -> None:
        if "scaling_governor" in command:
            reads[0] += 1
            if reads[0] in changes:
                dev.set_state(**changes[reads[0]])

    device.on_shell = on_shell


@pytestmark_e2e
def test_state_is_recorded_and_a_throttled_round_is_left_out(
    standin: AdbStandin, exported_toy_cnn, tmp_path: Path
) -> None:
    device = standin.add_device("HOT-1", sme2=True, sysfs=True)
    # State reads: the target's first (its governor), then before and after each round. The phone heats up (its
    # cap drops) after the first round's "before" and has cooled by the second round's "before".
    change_state_at_reads(device, {3: {"cap_khz": 1_800_000, "temp_c": 58}, 4: {"cap_khz": 3_000_000, "temp_c": 36}})
    session = _session(standin, "HOT-1", tmp_path)
    try:
        # 20 runs a round: half must be undisturbed (clean_runs_wanted), so the throttled first round gets an extra
        # round.
        profile = Runner(
            session, RunSpec(sme2=False, runs=20, warmup=1, max_rounds=3), session.test_dir("hot")
        ).profile(exported_toy_cnn)
        fingerprint = session.target.info.fingerprint
    finally:
        session.close()
    # Two rounds: the throttled one and its extra round. A third only when this host is so busy that the second round's
    # timings are disturbed too (seen beside a perf suite): max_rounds allows it, the throttling is the same.
    assert len(device.runs) in (2, 3) and profile.runs == 20 * len(device.runs)
    assert profile.throttled == 20 and profile.throttled_runs[:20].all() and not profile.throttled_runs[20:].any()
    assert set(range(20)) <= set(profile.disturbed_run_indices) and int(profile.clean[20:].sum()) > 0
    state = profile.metadata["device_state"]  # the first round's (metadata comes from the first chunk)
    assert state["throttled"] == "cpu0 capped at 1.80 GHz (was 3.00); cpu1 capped at 1.80 GHz (was 3.00)"
    assert state["after"]["cores"]["0"]["max_khz"] == 1_800_000 and state["before"]["hottest_c"] == 35.0
    assert state["governor"] == "schedutil" and "-gov-schedutil-" in fingerprint
    summary = profile.to_dict()
    assert summary["throttled_runs"] == 20
    assert "20 taken while the device throttled" in disturbed_text(summary)
    assert summary["metadata"]["device_state"]["throttled"] == state["throttled"]  # summary.json holds it
    assert device_state_text(summary) == (
        "device: governor schedutil, hottest 58.0 C, thermal status none, battery 30.0 C (Charging); 20 runs taken "
        "while throttled (cpu0 capped at 1.80 GHz (was 3.00); cpu1 capped at 1.80 GHz (was 3.00))"
    )
    assert device_state_text(summary) in profile_text(summary)
    from pytest_sme2.report.html import entry_html

    assert "device: governor schedutil, hottest 58.0 C" in entry_html(
        {"nodeid": "t", "profiles": [summary], "comparisons": []}
    )


@pytestmark_e2e
def test_cooldown_waits_for_the_device_before_timed_runs(standin: AdbStandin, exported_toy_cnn, tmp_path: Path) -> None:
    device = standin.add_device("HOT-2", sysfs=True)
    device.set_state(temp_c=52, thermal_status=2)
    # State reads: the target's first, then the cooldown's polls (5 s apart): hot, then cooled.
    change_state_at_reads(device, {3: {"temp_c": 40, "thermal_status": 0}})
    said: list[str] = []
    session = _session(standin, "HOT-2", tmp_path, cooldown_c=45.0, cooldown_max_s=60.0)
    session.say = said.append
    started = time.monotonic()
    try:
        profile = Runner(session, RunSpec(runs=3, warmup=0, max_rounds=1), session.test_dir("cool")).profile(
            exported_toy_cnn
        )
    finally:
        session.close()
    state = profile.metadata["device_state"]
    assert 4.5 <= state["cooldown_s"] < 30 and state["still_hot_after_cooldown"] is None
    assert time.monotonic() - started >= 4.5
    assert said == ["sme2: cooling down: thermal status moderate; waited 0 of 60 s"]
    assert state["before"]["hottest_c"] == 40.0 and profile.throttled == 0


@pytestmark_e2e
def test_a_device_without_cpufreq_or_thermal_files_runs_and_says_what_is_missing(
    standin: AdbStandin, exported_toy_cnn, tmp_path: Path
) -> None:
    standin.add_device("PLAIN-1")  # this VM's own /sys: no cpufreq, no thermal zone
    session = _session(standin, "PLAIN-1", tmp_path, cooldown_c=45.0, cooldown_max_s=60.0)
    try:
        profile = Runner(session, RunSpec(runs=3, warmup=0, max_rounds=1), session.test_dir("plain")).profile(
            exported_toy_cnn
        )
        fingerprint = session.target.info.fingerprint
    finally:
        session.close()
    state = profile.metadata["device_state"]
    assert state["after"]["missing"] == [
        "CPU frequencies (no readable cpufreq)",
        "temperatures (no readable thermal zone)",
    ]
    assert state["throttled"] is None and state["cooldown_s"] < 1 and "-gov-" not in fingerprint


@pytestmark_e2e
def test_fixed_performance_mode_is_on_for_the_session_and_off_after(
    standin: AdbStandin, exported_toy_cnn, tmp_path: Path
) -> None:
    device = standin.add_device("PERF-1", sysfs=True)
    session = Sme2Session(
        Settings(
            target="adb:PERF-1",
            cache_dir=tmp_path / "cache",
            session_dir=tmp_path / "art",
            target_options={"adb_server": standin.address, "adb_performance_mode": True, "adb_affinity": "3"},
        )
    )
    try:
        Runner(session, RunSpec(runs=2, warmup=0, max_rounds=1), session.test_dir("p")).profile(exported_toy_cnn)
        assert device.performance_mode_calls == ["true"]
        info = session.target.info
    finally:
        session.close()
    assert device.performance_mode_calls == ["true", "false"]
    assert info.details["fixed_performance_mode"] is True
    assert info.fingerprint.endswith("-gov-schedutil-fixedperf-cpus-3-nosme2")
    old = standin.add_device("OLD-1", android="10")
    old_props = old.home / "build.prop"
    old_props.write_text(old_props.read_text().replace("ro.build.version.sdk=35", "ro.build.version.sdk=29"))
    with pytest.raises(Exception, match=r"needs Android 11 \(SDK 30\) or later.*reports SDK 29"):
        Sme2Session(
            Settings(
                target="adb:OLD-1",
                target_options={"adb_server": standin.address, "adb_performance_mode": True},
                cache_dir=tmp_path / "c2",
                session_dir=tmp_path / "a2",
            )
        ).target
    assert old.performance_mode_calls == []


def _killed_session(standin: AdbStandin, serial: str, tmp_path: Path, sig: int) -> None:
    """A session in a process of its own, on ``serial`` with the fixed performance mode on, sent ``sig`` once
    its target is set up (the process is not pytest's: a SIGKILL to it kills nothing of this test run)."""
    import os
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "session.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from pytest_sme2.measure.session import Settings, Sme2Session
        from pytest_sme2.system import supervised
        supervised.install_signal_handlers()
        session = Sme2Session(Settings(target="adb:{serial}", cache_dir=Path({str(tmp_path / 'c')!r}),
                                       session_dir=Path({str(tmp_path / 'a')!r}),
                                       target_options={{"adb_server": {standin.address!r},
                                                        "adb_performance_mode": True}}))
        session.target
        print("ready", flush=True)
        time.sleep(120)
        """)
    )
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        os.kill(process.pid, sig)
        assert process.wait(timeout=60) == -sig
    finally:
        if process.poll() is None:
            process.kill()


@pytestmark_e2e
def test_a_killed_session_turns_the_performance_mode_off(standin: AdbStandin, exported_toy_cnn, tmp_path: Path) -> None:
    """SIGTERM to pytest mid-run: supervised.end_all puts the device setting back before the process dies."""
    import signal

    device = standin.add_device("PERF-2", sysfs=True)
    _killed_session(standin, "PERF-2", tmp_path, signal.SIGTERM)
    assert device.performance_mode_calls == ["true", "false"]


@pytestmark_e2e
def test_a_sigkilled_sessions_performance_mode_is_restored_and_recorded_by_the_next_session(
    standin: AdbStandin, tmp_path: Path
) -> None:
    """SIGKILL leaves no handler to turn the mode off: the device keeps it on. The session set a marker on the
    device first, so the next session (without the option) finds it, turns the mode off, says so, and records
    the state it read back from the device, not the option's."""
    import signal

    device = standin.add_device("PERF-3", sysfs=True)
    _killed_session(standin, "PERF-3", tmp_path, signal.SIGKILL)
    assert device.performance_mode_calls == ["true"]  # left on: nothing ran after SIGKILL
    session = Sme2Session(
        Settings(
            target="adb:PERF-3",
            cache_dir=tmp_path / "c2",
            session_dir=tmp_path / "a2",
            target_options={"adb_server": standin.address},
        )
    )
    try:
        with pytest.warns(UserWarning, match=r"fixed performance mode was left on .*turned it off"):
            info = session.target.info
    finally:
        session.close()
    assert device.performance_mode_calls == ["true", "false"]
    assert info.details["fixed_performance_mode"] is False and "fixedperf" not in info.fingerprint
    assert "left on by an earlier session" in info.details["restored_settings"]
    assert not [p for p in device.root.iterdir() if "settings" in p.name]  # the marker is gone with the setting


@pytestmark_e2e
def test_a_performance_mode_the_device_cannot_record_is_never_turned_on(standin: AdbStandin, tmp_path: Path) -> None:
    """A device whose marker cannot be written is never switched: a later session could not undo it."""
    device = standin.add_device("PERF-4", sysfs=True)
    (device.root / "pytest-sme2-settings.tmp").mkdir(parents=True)  # in the way: no marker can be written
    session = Sme2Session(
        Settings(
            target="adb:PERF-4",
            cache_dir=tmp_path / "c",
            session_dir=tmp_path / "a",
            target_options={"adb_server": standin.address, "adb_performance_mode": True},
        )
    )
    with pytest.raises(Exception, match="cannot record the fixed performance mode on the device"):
        session.target
    assert device.performance_mode_calls == []


@pytestmark_e2e
def test_a_profile_taken_throttled_is_inconclusive_not_a_regression(
    standin: AdbStandin, exported_toy_cnn, tmp_path: Path
) -> None:
    """The same device measured cool (the baseline), then capped to 60% for its whole round: slower, but the
    gate gives no verdict on runs a throttled device made."""
    from pytest_sme2.gate.baselines import record_of
    from pytest_sme2.gate.checks.latency import latency_verdict
    from pytest_sme2.gate.verdict import Status, Tolerances

    device = standin.add_device("HOT-3", sysfs=True)
    session = _session(standin, "HOT-3", tmp_path)
    try:
        cool = Runner(session, RunSpec(runs=20, warmup=1, max_rounds=1), session.test_dir("cool")).profile(
            exported_toy_cnn
        )
        device.set_state(cap_khz=1_800_000)
        hot = Runner(session, RunSpec(runs=20, warmup=1, max_rounds=1), session.test_dir("hot")).profile(
            exported_toy_cnn
        )
    finally:
        session.close()
    assert cool.throttled == 0 and hot.throttled == 20 and hot.disturbed_runs == 20
    verdict = latency_verdict("toy_cnn", record_of(hot), record_of(cool), Tolerances())
    assert verdict.status == Status.INCONCLUSIVE and not verdict.failed
    assert "0 undisturbed of 20 runs" in verdict.message and "the device throttled" in verdict.message
