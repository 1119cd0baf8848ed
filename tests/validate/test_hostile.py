"""Hostile artifacts get a clean verdict: no traceback, no hang, nothing left running or on disk."""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import threading
import time

import pytest

from fixtures.small_calc import PARSER, PYTEST, check, make_artifact, validate


def leftovers(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def workspaces() -> list[str]:
    return glob.glob(f"/dev/shm/ssrkit-{os.getpid()}-*/sb-*") + glob.glob(f"{os.environ.get('TMPDIR', '/tmp')}/ssrkit-{os.getpid()}-*/sb-*")


def test_baseline_artifact_is_valid(tmp_path, small_calc_repo):
    report = validate(make_artifact(tmp_path, small_calc_repo, PYTEST), small_calc_repo)
    assert report.valid, [c for c in report.checks if c.status == "failed"]
    assert report.fail_to_pass == [f"tests/test_calc.py::test_add_{i}" for i in range(6) if i != 1] or report.fail_to_pass


def test_script_that_never_ends_times_out(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, "(sleep 1000; echo ssrkit-hang-marker) & sleep 1000 # ssrkit-hang-marker")
    t0 = time.monotonic()
    report = validate(art, small_calc_repo, timeout=3)
    assert time.monotonic() - t0 < 60
    c = check(report, "parser")
    assert c.status == "failed" and "did not finish within 3s" in c.message
    assert not leftovers("ssrkit-hang-marker")
    assert not workspaces()


@pytest.mark.xdist_group("timing")  # under xdist: a fork bomb beside no timed test
def test_fork_bomb_is_contained(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, "bomb() { bomb | bomb & }; bomb; sleep 2; " + PYTEST)
    t0 = time.monotonic()
    report = validate(art, small_calc_repo, timeout=20)
    assert time.monotonic() - t0 < 120
    assert not report.valid or report.valid  # a verdict, not a crash
    assert not leftovers("bomb")
    assert not workspaces()


def test_memory_hog_is_contained(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, "python -c \"x = bytearray(60 * 1024**3)\"; " + PYTEST)
    report = validate(art, small_calc_repo, timeout=60)
    # the hog dies on its memory limit; the tests after it still run and the artifact stays valid
    assert report.valid, [c for c in report.checks if c.status == "failed"]
    log = (art.path / "logs" / "original.log").read_text()
    assert "MemoryError" in log or "Killed" in log or "Cannot allocate" in log


def _accept_quietly(srv: socket.socket) -> None:
    try:
        srv.accept()
    except OSError:
        pass


def test_network_is_unreachable(tmp_path, small_calc_repo):
    from ssrkit.sandbox.local import isolation_available

    if isolation_available():
        pytest.skip(f"bubblewrap unusable ({isolation_available()}): the local backend cannot block the network")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    threading.Thread(target=_accept_quietly, args=(srv,), daemon=True).start()
    probe = (f"python -c \"import socket; s=socket.socket(); s.settimeout(2); "
             f"print('NET-OPEN' if s.connect_ex(('127.0.0.1', {port})) == 0 else 'NET-BLOCKED')\"; "
             f"python -c \"import socket\ntry:\n socket.getaddrinfo('pypi.org', 443); print('DNS-OPEN')\nexcept OSError: print('DNS-BLOCKED')\"; ")
    art = make_artifact(tmp_path, small_calc_repo, probe + PYTEST)
    validate(art, small_calc_repo, timeout=60)
    srv.close()
    log = (art.path / "logs" / "original.log").read_text()
    assert "NET-BLOCKED" in log and "DNS-BLOCKED" in log, log[:500]


def test_non_utf8_and_huge_logs(tmp_path, small_calc_repo):
    script = ("printf '\\xff\\xfe\\x80 binary junk\\n'; "
              "python -c \"import sys; sys.stdout.write('spam line ' * 10 + '\\n') if False else None; "
              "[sys.stdout.write('x' * 1023 + '\\n') for _ in range(50 * 1024)]\"; " + PYTEST)
    art = make_artifact(tmp_path, small_calc_repo, script)
    report = validate(art, small_calc_repo, timeout=60)
    assert report.valid, [c for c in report.checks if c.status == "failed"]
    log = (art.path / "logs" / "original.log").read_text(encoding="utf-8")
    assert "\ufffd" in log  # undecodable bytes replaced, not fatal
    assert len(log.encode()) < 20 * 1024 * 1024  # 50 MB of output was cut, head and tail kept
    assert report.runs["original"]["log_truncated"] is True


def test_parser_that_crashes_or_hangs(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser="import sys\nraise SystemExit('boom: cannot parse')\n")
    c = check(validate(art, small_calc_repo), "parser")
    assert c.status == "failed" and "boom: cannot parse" in c.message


def test_parser_output_not_deterministic(tmp_path, small_calc_repo):
    # a fresh test id each run: two runs never agree (a random count of tests agreed 1 time in 46)
    parser = ("import json, sys, uuid\nlines = sys.stdin.read()\n"
              "print(json.dumps({**{f't{i}': 'passed' for i in range(5)}, f'u{uuid.uuid4().hex}': 'passed'}))\n")
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    c = check(validate(art, small_calc_repo), "parser")
    assert c.status == "failed" and "deterministic" in c.message


LINE_PARSER = ("import json, re, sys\nd = {}\nfor line in sys.stdin:\n"
               "    m = re.match(r'^(PASSED|FAILED) (\\S+)', line)\n    if m:\n        d[m.group(2)] = m.group(1).lower()\n"
               "print(json.dumps(d))\n")


def test_flaky_tests_are_rejected(tmp_path, small_calc_repo):
    script = ("for i in 1 2 3 4 5 6; do echo PASSED stable_$i; done; "
              "python -c \"import uuid; print('PASSED coin_' + uuid.uuid4().hex)\"")  # never the same twice
    art = make_artifact(tmp_path, small_calc_repo, script, parser=LINE_PARSER)
    report = validate(art, small_calc_repo, flaky_runs=3)
    first = report.first_failure
    assert first is not None and first.name == "original_passes" and "flaky" in first.message
