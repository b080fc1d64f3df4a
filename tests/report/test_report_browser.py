"""The HTML reports in a real browser: headless Chromium (Debian's chromium package).

A pytester session on the tiny model writes the pytest-html report and the
session's report.html. Each is opened in headless Chromium twice: once as is,
for a screenshot, and once as a copy with a checker injected at the top of
<head>. The checker forbids every network request with a Content-Security-
Policy (a self-contained page needs none, so any violation is an external
request), records script errors and resource load failures, and, after the
page has loaded and run its own scripts, writes what it found into the DOM,
which ``--dump-dom`` prints. No DevTools client is needed. ``<img src="">``
is skipped: pytest-html's media viewer template clones one into every row
as an empty placeholder (hidden when a test has no image extras).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSTALL = "apt-get install -y chromium (as root; `make test` does it)"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHECKER = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:;
 style-src 'unsafe-inline' data:; script-src 'unsafe-inline'; font-src data:">
<script>
window.__sme2 = {errors: [], blocked: []};
window.addEventListener("error", function (e) {
  var t = e.target;
  if (t && t.getAttribute && t.getAttribute("src") === "") return;  // an empty placeholder, not an image
  window.__sme2.errors.push(t && t !== window && (t.src || t.href) ? "failed to load " + String(t.src || t.href).slice(0, 80)
                                                                  : String(e.message));
}, true);
document.addEventListener("securitypolicyviolation", function (e) { window.__sme2.blocked.push(e.blockedURI); });
window.addEventListener("load", function () {
  setTimeout(function () {
    var images = Array.prototype.slice.call(document.images).filter(function (i) { return i.getAttribute("src") !== ""; });
    var broken = images.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
    var top = function (e) { return e ? e.getBoundingClientRect().top + window.scrollY : null; };
    var cause = document.querySelector(".sme2 .cause");
    var out = document.createElement("pre");
    out.id = "sme2-browser-check";
    out.textContent = JSON.stringify({images: images.length, broken: broken.map(function (i) { return i.alt || i.src.slice(0, 40); }),
                                      errors: window.__sme2.errors, blocked: window.__sme2.blocked,
                                      cause_top: top(cause), cause_text: cause ? cause.textContent.slice(0, 8000) : null,
                                      first_chart_top: top(document.querySelector(".sme2 img")),
                                      first_table_top: top(document.querySelector(".sme2 .cause ~ table, .sme2 .cause ~ h4"))});
    document.body.appendChild(out);
  }, 1000);
});
</script>"""

PERF_TEST = """
import pytest

@pytest.mark.perf(runs=4, warmup=1)
@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=f"headless Chromium is not installed: {INSTALL}")


def _chromium(args: list[str], profile_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", *args], capture_output=True, text=True, timeout=120
    )


def _check(page: Path, tmp_path: Path) -> dict:
    """What the injected checker saw in the page (images, broken images, script errors, blocked requests)."""
    text = page.read_text(encoding="utf-8")
    checked = page.with_name(page.stem + ".checked.html")
    checked.write_text(re.sub(r"<head[^>]*>", lambda m: m.group(0) + CHECKER, text, count=1), encoding="utf-8")
    run = _chromium(["--virtual-time-budget=10000", "--dump-dom", checked.as_uri()], tmp_path / "profile-check")
    found = re.search(r'<pre id="sme2-browser-check">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the checker never reported for {page}; chromium stderr:\n{run.stderr[-2000:]}"
    return json.loads(
        found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    )


def _screenshot(page: Path, png: Path, tmp_path: Path) -> None:
    _chromium(
        ["--window-size=1280,2400", "--hide-scrollbars", f"--screenshot={png}", page.as_uri()],
        tmp_path / "profile-shot",
    )
    assert png.exists() and png.stat().st_size > 10_000, f"no screenshot of {page}"


def test_reports_render_in_headless_chromium(sme2_project: pytest.Pytester, tmp_path: Path) -> None:
    sme2_project.makepyfile(PERF_TEST)
    sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "--html=report.html", "--self-contained-html")
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    pages = {"pytest-html": sme2_project.path / "report.html", "session": session / "report.html"}
    for name, page in pages.items():
        assert page.exists(), f"{name} report was not written"
        result = _check(page, tmp_path)
        assert result["errors"] == [] and result["broken"] == [], f"{name} report: {result}"
        assert result["blocked"] == [], f"{name} report makes external requests: {result['blocked']}"
        # the session page has the three charts; pytest-html renders them from its data blob with its own script
        assert result["images"] >= 3, f"{name} report shows {result['images']} images"
        _screenshot(page, tmp_path / f"{name}.png", tmp_path)
    shutil.copy(tmp_path / "session.png", sme2_project.path / "session.png")  # kept with the pytester project


def test_a_failed_test_opens_on_its_cause_and_advice_before_any_chart(
    sme2_project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 65: a failed test's section opened on the banner, tables and charts, its headline about 2,500 px
    down under "Baseline comparison", and the summary table said only "regression". Laid out by the browser:
    the cause (the gate's headline) and the advice are above the first table and chart, and the summary says why."""
    from helpers_gate import UPDATE, _test_file

    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the inner runs gate: undo conftest's --sme2-no-baselines
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    changed = _test_file().replace('@pytest.mark.model("tiny")', '@pytest.mark.model("tiny", partitioner="none")')
    sme2_project.makepyfile(test_gate=changed)
    failed = sme2_project.runpytest_inprocess(
        "--sme2-artifacts-dir=artifacts", "--html=report.html", "--self-contained-html"
    )
    failed.assert_outcomes(failed=1)
    # written from the change: without the partitioner the convolution (the first node) runs outside the delegate
    headline = (
        "tiny fp32-none [host sme2=auto threads=1]: node(s) fell out of the delegate: 0: aten.convolution.default"
    )
    (session,) = (sme2_project.path / "artifacts").glob("session-*")
    for name, page in {"session": session / "report.html", "pytest-html": sme2_project.path / "report.html"}.items():
        found = _check(page, tmp_path)
        assert found["cause_top"] is not None, f"{name} report: no cause block"
        assert headline in found["cause_text"], f"{name} report's cause: {found['cause_text']!r}"
        assert "What to do" in found["cause_text"], f"{name} report's cause has no advice: {found['cause_text']!r}"
        for what in ("first_chart_top", "first_table_top"):
            assert found[what] is None or found["cause_top"] < found[what], f"{name} report: {what} {found}"
    session_page = (session / "report.html").read_text(encoding="utf-8")
    assert "regression: tiny" in session_page and headline in session_page.split("<h3>", 1)[0]
    _screenshot(session / "report.html", tmp_path / "failed.png", tmp_path)


def test_checker_catches_a_broken_image_and_an_external_request(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><head></head><body><img alt="broken" src="data:image/png;base64,AAAA">'
        '<img alt="remote" src="http://192.0.2.1/x.png"><script>undefinedFunction()</script></body></html>'
    )
    result = _check(page, tmp_path)
    assert "broken" in result["broken"] and "remote" in result["broken"]
    assert any("undefinedFunction" in e for e in result["errors"])
    assert any("192.0.2.1" in b for b in result["blocked"])


def test_combined_report_of_an_emulated_and_a_host_session_renders_both_targets(
    sme2_project: pytest.Pytester, tmp_path: Path
) -> None:
    from pytest_sme2.cli import main
    from pytest_sme2.run import emulation_setup as emulation

    status = emulation.status()
    if not status.ready:
        pytest.skip(f"the emulated target is not ready: {status.problem}")
    sme2_project.makepyfile(PERF_TEST)
    for target in ("emulated", "host"):
        result = sme2_project.runpytest_inprocess(
            f"--sme2-target={target}",
            f"--sme2-artifacts-dir=artifacts-{target}",
            "--sme2-no-baselines",
            "-p",
            "no:cacheprovider",
        )
        result.assert_outcomes(passed=1)
    sessions = [str(next((sme2_project.path / f"artifacts-{t}").glob("session-*"))) for t in ("emulated", "host")]
    out = sme2_project.path / "combined"
    assert main(["report", *sessions, "--out", str(out)]) == 0
    markdown = (out / "combined.md").read_text()
    table = markdown[markdown.index("### `") :]
    header = next(line for line in table.splitlines() if line.startswith("| variant |"))
    assert "emulated (" in header and "host (" in header  # both targets side by side for the test
    row = next(line for line in table.splitlines() if line.startswith("| sme2=auto threads=1 |"))
    emulated_cell, host_cell = [cell.strip() for cell in row.strip("|").split("|")[1:3]]
    assert emulated_cell.endswith("instr") and host_cell.endswith(" ms")  # counted there, timed here
    # a category-share chart per variant, one bar per target, drawn inside the page
    assert (out / "combined.html").read_text().count('src="data:image/png;base64,') >= 1
    result = _check(out / "combined.html", tmp_path)
    assert result["errors"] == [] and result["broken"] == [] and result["blocked"] == [], result
    # an artifacts folder lists its sessions instead of failing
    assert main(["report", str(sme2_project.path / "artifacts-host")]) == 0
    # analyze of the emulated run's ETDump reads the counted instructions beside it, as its session did
    import json

    from pytest_sme2.report.commands import analyze

    [emulated_profile] = json.loads(Path(sessions[0], "summary.json").read_text())["tests"][0]["profiles"]
    etdump = next(Path(sessions[0]).rglob("timed.etdp"))
    analyzed = json.loads(analyze(etdump, None, None, as_json=True))
    assert emulated_profile["basis"] == analyzed["basis"] == "instructions"
    assert analyzed["shares"] == pytest.approx(emulated_profile["shares"], abs=1e-6)
    assert "shares of counted instructions" in analyze(etdump, None, None, as_json=False)
