"""`make test` runs on pytest-xdist workers with `--dist loadgroup`: the tests of one `xdist_group` (ray, ranks,
docker-task, timing) must share a worker, or two Ray clusters or two multi-process training runs start side by
side. Checked on a generated suite, with the suite's own plugin (fixtures/xdist_groups.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from fixtures.paths import pythonpath

SUITE = textwrap.dedent("""
    import time

    import pytest


    @pytest.mark.xdist_group("g")
    @pytest.mark.parametrize("i", range(4))
    def test_grouped(i):
        time.sleep(0.2)


    @pytest.mark.parametrize("i", range(4))
    def test_free(i):
        time.sleep(0.2)
""")


def test_the_tests_of_one_group_run_on_one_worker(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_suite.py").write_text(SUITE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "fixtures.xdist_groups", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": pythonpath(),
                                                                            "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED \S+::(test_\w+)\[", proc.stdout)
    assert len(ran) == 8, proc.stdout[-3000:]
    assert len({worker for worker, name in ran if name == "test_grouped"}) == 1, ran
