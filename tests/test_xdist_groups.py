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


def test_the_longest_units_go_out_first():
    """Groups and the heavy modules of `EXPECTED` first, longest first; every other test after them in collection
    order, and the tests of one module or group in their order."""
    from types import SimpleNamespace

    from fixtures.xdist_groups import longest_first

    ids = ["tests/agents/test_loop.py::test_a", "tests/train/test_sharded.py::test_run[fsdp2]@ranks",
           "tests/test_example_artifacts.py::test_one[x@y]", "tests/agents/test_loop.py::test_b",
           "tests/cluster/test_ray.py::test_c@ray", "tests/train/test_sharded.py::test_run[zero3]@ranks",
           "tests/test_example_artifacts.py::test_reference_checker_agrees_with_expected",
           "tests/solve/test_cli.py::test_d", "tests/train/test_cli.py::test_e"]  # one file name, two modules
    order = [item.nodeid for item in longest_first([SimpleNamespace(nodeid=i) for i in ids])]
    assert order == [ids[1], ids[5], ids[4], ids[8], ids[2], ids[6], ids[0], ids[3], ids[7]]
