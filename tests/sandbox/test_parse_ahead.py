"""A parser started while the tests run elsewhere (`testrun._ParseAhead`, `templates/parse_ahead.py`) is the
parser a later command would have run: same view of itself, same stdin, same exit codes and errors, same
budget, and nothing of an earlier parse (issue 15)."""

from __future__ import annotations

import os
import time

import pytest

from fixtures.git import commit_all
from fixtures.repos import make_proj_repo
from ssrkit import testrun
from ssrkit.errors import PatchError
from ssrkit.testrun import run_tests

#: under bubblewrap only: without it the tests could feed the waiting parser themselves, so it never waits
LOCAL = pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)

#: prints how it sees itself and its input, as test statuses (the values) keyed by what it saw
SELF_VIEW = """\
import hashlib, json, os, sys
data = sys.stdin.buffer.read()
again = os.read(0, 10)  # the log is stdin, fd 0 included
seen = {
    "argv0=" + os.path.basename(sys.argv[0]): "passed",
    "argc=" + str(len(sys.argv)): "passed",
    "path0=" + os.path.basename(sys.path[0]): "passed",
    "name=" + __name__: "passed",
    "file=" + os.path.basename(__file__): "passed",
    "sha=" + hashlib.sha256(data).hexdigest()[:16]: "passed",
    "again=" + repr(again): "passed",
    "cwd=" + os.path.basename(os.getcwd()): "passed",
}
print(json.dumps(seen))
"""

PARSER_LINES = "import json, sys\nprint(json.dumps(dict(l.split() for l in sys.stdin if l.strip())))\n"

SCRIPT = "printf 'one passed\\nünï passed\\n'; echo two failed"


@pytest.fixture(autouse=True)
def parses(monkeypatch):
    """What each `_ParseAhead.parse` returned (None: it fell back to a command of its own)."""
    got: list = []
    real = testrun._ParseAhead.parse

    def parse(self, log):
        got.append(real(self, log))
        return got[-1]

    monkeypatch.setattr(testrun._ParseAhead, "parse", parse)
    return got


def assert_parsed_ahead(got):
    assert got and all(g is not None for g in got), "the parse fell back to a command of its own"


def both(opener, repo, monkeypatch, parses, parser, script=SCRIPT):
    """(the run parsed ahead, the same run parsed by a command started after it)."""
    work, clean = opener(repo), opener(repo)
    assert clean.parses_ahead
    ahead = run_tests(work, script, parser, timeout=30, parse_in=clean)
    assert_parsed_ahead(parses)
    monkeypatch.setattr(type(clean), "parses_ahead", property(lambda self: False))
    after = run_tests(work, script, parser, timeout=30, parse_in=clean)
    return ahead, after


@LOCAL
def test_the_parser_sees_itself_and_its_log_as_in_a_command_of_its_own(opener, shared_repo, monkeypatch, parses):
    ahead, after = both(opener, shared_repo, monkeypatch, parses, SELF_VIEW)
    assert ahead.parse_error is None, ahead.parse_error
    assert ahead.statuses == after.statuses
    assert "argv0=test_parser.py" in ahead.statuses and "name=__main__" in ahead.statuses
    assert "again=b''" in ahead.statuses  # stdin was read to its end, fd 0 is the same file


@LOCAL
@pytest.mark.parametrize("parser, fragment", [
    ("raise ValueError('boom in the parser')\n", "exited with code 1: ValueError: boom in the parser"),
    ("import sys\nsys.exit('a message of its own')\n", "exited with code 1: a message of its own"),
    ("import sys\nprint('{}')\nsys.exit(3)\n", "exited with code 3"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "exited with code 137"),
    ("print('not json')\n", "did not print valid JSON"),
])
def test_a_failing_parser_fails_alike(opener, shared_repo, monkeypatch, parses, parser, fragment):
    ahead, after = both(opener, shared_repo, monkeypatch, parses, parser)
    assert ahead.statuses == {} and fragment in (ahead.parse_error or ""), ahead.parse_error
    assert ahead.parse_error == after.parse_error


@LOCAL
@pytest.mark.parametrize("parser", [
    # a thread that is not a daemon prints the result after the main code ended
    "import json, threading\nthreading.Thread(target=lambda: print(json.dumps({'t': 'passed'}))).start()\n",
    "import json\nfrom concurrent.futures import ThreadPoolExecutor\n"
    "ThreadPoolExecutor(1).submit(lambda: print(json.dumps({'t': 'passed'})))\n",
    "import json, sys\nprint(json.dumps({'t': 'passed'}))\nsys.stdout.close()\n",
    "import json, sys\nprint(json.dumps({'t': 'passed'}))\nsys.stdout.flush()\nsys.stdout = None\n",
    "import json, os\nout = os.fdopen(1, 'w', closefd=False)\nout.write(json.dumps({'t': 'passed'}))\n",
    "import json\nprint(json.dumps({'loader': type(__loader__).__name__, 'package': repr(__package__),"
    " 'spec': repr(__spec__)}))\n",
])
def test_a_parser_that_ends_in_unusual_ways_succeeds_alike(opener, shared_repo, monkeypatch, parses, parser):
    ahead, after = both(opener, shared_repo, monkeypatch, parses, parser)
    assert (ahead.statuses, ahead.parse_error) == (after.statuses, after.parse_error)


@LOCAL
def test_an_interrupted_parser_exits_as_a_script_does(opener, shared_repo, monkeypatch, parses):
    ahead, after = both(opener, shared_repo, monkeypatch, parses, "raise KeyboardInterrupt\n")
    assert ahead.parse_error == after.parse_error and "exited with code 130" in (ahead.parse_error or "")


def test_modules_of_the_repository_named_like_the_standard_library_are_the_parsers_to_find(
        tmp_path, monkeypatch, parses):
    """The repository is on PYTHONPATH: a `select.py` or `signal.py` of its own breaks neither the waiting
    script (in the clean sandbox, or in the test command) nor hides it from the parser, which finds the
    repository's as it would in a command of its own."""
    from ssrkit.sandbox import open_sandbox
    from ssrkit.sandbox.local import isolation_available
    from ssrkit.store.source import RepoSource

    if isolation_available():
        pytest.skip(f"bubblewrap unusable: {isolation_available()}")
    monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", "bwrap")
    repo = make_proj_repo(tmp_path)
    for name in ("select", "signal", "ctypes", "runpy", "pkgutil"):
        (repo / f"{name}.py").write_text(f"MINE = {name!r}\n")
    commit_all(repo, "x")
    parser = "import json, signal, select\nprint(json.dumps({signal.MINE: 'passed', select.MINE: 'passed'}))\n"
    with open_sandbox(RepoSource.local(repo), "local") as work, open_sandbox(RepoSource.local(repo), "local") as clean:
        assert "PYTHONPATH" in clean.run("env", timeout=30).output
        ahead = run_tests(work, SCRIPT, parser, timeout=30, parse_in=clean)
        assert_parsed_ahead(parses)
        monkeypatch.setattr(type(clean), "parses_ahead", property(lambda self: False))
        after = run_tests(work, SCRIPT, parser, timeout=30, parse_in=clean)
        in_run = run_tests(work, SCRIPT, parser, timeout=30, parse_twice=True)  # the test command's own parser
    assert ahead.statuses == after.statuses == in_run.statuses == in_run.reparsed, (ahead.parse_error,
                                                                                  after.parse_error)


@LOCAL
def test_output_of_atexit_functions_and_unflushed_prints_is_kept(opener, shared_repo, monkeypatch, parses):
    parser = ("import atexit, json, sys\n"
              "sys.stdout.write('{\"first\": ')\n"  # buffered, never flushed by the parser
              "atexit.register(lambda: print('\"passed\"}'))\n")
    ahead, after = both(opener, shared_repo, monkeypatch, parses, parser)
    assert ahead.statuses == after.statuses == {"first": "passed"}


@pytest.mark.xdist_group("timing")  # under xdist: a wall-clock bound, beside no other
@LOCAL
def test_the_parser_budget_counts_from_the_log_not_from_the_start(opener, shared_repo, monkeypatch, parses):
    monkeypatch.setattr(testrun, "PARSER_TIMEOUT", 1.5)
    work, clean = opener(shared_repo), opener(shared_repo)
    # the tests take longer than the parser's budget: the parser, waiting meanwhile, is not timed out
    slow_tests = f"sleep 2; {SCRIPT}"
    run = run_tests(work, slow_tests, "import sys, json\nprint(json.dumps({'t': 'passed'}))\n", timeout=30,
                    parse_in=clean)
    assert run.statuses == {"t": "passed"} and run.parse_error is None
    assert_parsed_ahead(parses)
    # a parser that outlives its budget is killed with every process it started, and says so
    marker = clean.scratch_path("left-behind")
    parser = (f"import os, time\nif os.fork() == 0:\n    time.sleep(3)\n    open({marker!r}, 'w').write('x')\n"
              "time.sleep(30)\n")
    t0 = time.monotonic()
    run = run_tests(work, SCRIPT, parser, timeout=30, parse_in=clean)
    assert time.monotonic() - t0 < 10
    assert run.parse_error == "test_parser.py did not finish within 2s"
    assert_parsed_ahead(parses)
    time.sleep(3.5)
    with pytest.raises(FileNotFoundError):
        clean.read_file(marker)


@LOCAL
def test_each_parse_sees_its_own_log_only(opener, shared_repo, parses):
    work, clean = opener(shared_repo), opener(shared_repo)
    parser = "import json, sys\nprint(json.dumps({l.split()[0]: 'passed' for l in sys.stdin if l.strip()}))\n"
    first = run_tests(work, "echo first", parser, timeout=30, parse_in=clean)
    second = run_tests(work, "echo second", parser, timeout=30, parse_in=clean)
    assert first.statuses == {"first": "passed"} and second.statuses == {"second": "passed"}
    assert len(parses) == 2
    assert_parsed_ahead(parses)


@pytest.mark.xdist_group("timing")  # under xdist: a wall-clock bound, beside no other
@LOCAL
def test_a_run_that_never_starts_stops_the_waiting_parser(opener, shared_repo):
    work, clean = opener(shared_repo), opener(shared_repo)
    t0 = time.monotonic()
    with pytest.raises(PatchError):
        run_tests(work, SCRIPT, SELF_VIEW, timeout=30, parse_in=clean,
                  diffs=[("bug.diff", "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")])
    assert time.monotonic() - t0 < 10
    t0 = time.monotonic()
    assert clean.run("echo free", timeout=30).output == "free\n"
    assert time.monotonic() - t0 < 5  # not held by a parser waiting for a log


@LOCAL
def test_the_same_sandbox_never_parses_ahead_of_its_own_tests(opener, shared_repo, monkeypatch):
    sb = opener(shared_repo)
    started = []
    monkeypatch.setattr(testrun._ParseAhead, "__init__",
                        lambda self, *a, **kw: started.append(a) or pytest.fail("parsed ahead in the same sandbox"))
    run = run_tests(sb, SCRIPT, SELF_VIEW, timeout=30, parse_in=sb)
    assert run.parse_error is None and not started


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_the_tests_cannot_reach_the_parser_waiting_for_their_log(opener, shared_repo, parses):
    """While the code under test runs, the clean sandbox's parser waits for the log: the tests look for it
    (its processes, its signal file, its scratch directory) to feed it a log of their own, and find none."""
    work, clean = opener(shared_repo), opener(shared_repo)
    clean_dir = clean.scratch_path("")
    hunt = (f"sleep 1; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '[p]arse_ahead'; "
            f"find /dev/shm /tmp / -maxdepth 6 -name 'test_parser.signal' 2>/dev/null | head -3; "
            f"ls {clean_dir} 2>&1 | sed 's/^/ls: /' | head -3; "
            f"for d in /dev/shm/*/ /dev/shm/*/*/; do printf go > $d/scratch/test_parser.signal; done 2>/dev/null; "
            "echo one passed")
    parser = "import json, sys\nprint(json.dumps({'seen': 'passed', 'log': sys.stdin.read() and 'passed'}))\n"
    run = run_tests(work, hunt, parser, timeout=60, parse_in=clean)
    assert_parsed_ahead(parses)
    lines = run.log.splitlines()
    assert lines[0] == "0", run.log  # no process of the parser in sight
    assert "test_parser.signal" not in run.log and "parse_ahead" not in run.log, run.log
    assert any(ln.startswith("ls: ") and "No such file or directory" in ln for ln in lines), run.log
    assert run.statuses == {"seen": "passed", "log": "passed"}


@pytest.mark.parametrize("opener", ["local-none"], indirect=True)
def test_without_bubblewrap_the_parser_never_waits_where_the_tests_could_feed_it(opener, shared_repo, parses):
    """Without bubblewrap the tests could find the other sandbox's scratch directory and write a log and the
    signal themselves: the parse starts after the run, as a command of its own."""
    work, clean = opener(shared_repo), opener(shared_repo)
    assert not clean.parses_ahead
    forge = ("for d in $HOME/../../sb-*/scratch; do printf 'forged passed\\n' > $d/test_parser.log; "
             "printf go > $d/test_parser.signal; done 2>/dev/null; echo real failed")
    parser = "import json, sys\nprint(json.dumps(dict(l.split() for l in sys.stdin if l.strip())))\n"
    run = run_tests(work, forge, parser, timeout=30, parse_in=clean)
    assert run.statuses == {"real": "failed"} and not parses


@LOCAL
def test_a_parser_that_dies_while_waiting_falls_back_to_a_command_of_its_own(opener, shared_repo, parses):
    import signal
    import threading

    work, clean = opener(shared_repo), opener(shared_repo)
    if clean.cgroup is None:
        pytest.skip("the waiting parser is found through the sandbox's cgroup")

    def kill_the_waiting_parser():
        time.sleep(0.8)
        pids, running = clean.cgroup.pids(), clean._proc.pid if clean._proc is not None else None
        for pid in set(pids) - clean._ahead.spared(pids, running):  # not the sandbox's waiting processes
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_waiting_parser)
    killer.start()
    run = run_tests(work, "sleep 1.6; echo one passed", PARSER_LINES, timeout=30, parse_in=clean)
    killer.join()
    assert parses == [None]  # the parse ahead had nothing to say: the log was parsed by a later command
    assert run.statuses == {"one": "passed"} and run.parse_error is None


# -- validation: the test command's shell becomes the parser once the tests end (`--after-tests`) ----------

def in_run_and_alone(opener, repo, monkeypatch, parser, script=SCRIPT):
    """(the run parsed twice in the test command, the same run parsed twice by a command of its own)."""
    sb = opener(repo)
    assert sb.parses_in_run
    alone_parses = []
    real = testrun._parse_separately
    monkeypatch.setattr(testrun, "_parse_separately", lambda *a: (alone_parses.append(a), real(*a))[1])
    in_run = run_tests(sb, script, parser, timeout=30, parse_twice=True)
    assert not alone_parses, "the parse fell back to a command of its own"
    monkeypatch.setattr(type(sb), "parses_in_run", property(lambda self: False))
    alone = run_tests(sb, script, parser, timeout=30, parse_twice=True)
    assert alone_parses
    return in_run, alone


def same_parse(a, b):
    assert (a.statuses, a.parse_error, a.reparsed) == (b.statuses, b.parse_error, b.reparsed)


@LOCAL
def test_the_parser_of_the_test_command_sees_itself_as_a_command_of_its_own(opener, shared_repo, monkeypatch):
    in_run, alone = in_run_and_alone(opener, shared_repo, monkeypatch, SELF_VIEW)
    assert in_run.parse_error is None and "argv0=test_parser.py" in in_run.statuses
    same_parse(in_run, alone)
    assert in_run.reparsed == in_run.statuses


@LOCAL
@pytest.mark.parametrize("parser", [
    "raise ValueError('boom in the parser')\n",
    "import sys\nprint('{}')\nsys.exit(3)\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "raise KeyboardInterrupt\n",
    "import json, threading\nthreading.Thread(target=lambda: print(json.dumps({'t': 'passed'}))).start()\n",
    "import json, sys\nprint(json.dumps({'t': 'passed'}))\nsys.stdout.close()\n",
    "import atexit, json, sys\nsys.stdout.write('{\"t\": ')\natexit.register(lambda: print('\"passed\"}'))\n",
    # ends the interpreter at once: the second parse, still running, is made again on its own
    "import json, os, sys\nprint(json.dumps({'t': 'passed'}))\nsys.stdout.flush()\nos._exit(0)\n",
])
def test_the_parser_of_the_test_command_ends_and_fails_alike(opener, shared_repo, monkeypatch, parser):
    in_run, alone = in_run_and_alone(opener, shared_repo, monkeypatch, parser)
    same_parse(in_run, alone)


@LOCAL
def test_the_second_parse_is_a_fresh_interpreter(opener, shared_repo, monkeypatch):
    """Validation's determinism check parses twice: the second parse starts a Python of its own (a hash
    seed of its own), so a parser whose output follows the hash of a string is caught."""
    parser = "import json\nprint(json.dumps({'h%d' % hash('ssrkit'): 'passed'}))\n"
    in_run, _ = in_run_and_alone(opener, shared_repo, monkeypatch, parser)
    assert in_run.statuses and in_run.reparsed is not None and in_run.reparsed != in_run.statuses


def test_a_failing_module_of_the_repository_named_json_fails_the_parser_alone(tmp_path, monkeypatch):
    """`json` is imported before the tests run, as the parser would find it: a repository's json.py that
    raises (or exits) at import does not stop the waiting script (the tests run to their end), and the
    parser meets the failure on its own, as in a command of its own."""
    from ssrkit.sandbox import open_sandbox
    from ssrkit.sandbox.local import isolation_available
    from ssrkit.store.source import RepoSource

    if isolation_available():
        pytest.skip(f"bubblewrap unusable: {isolation_available()}")
    monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", "bwrap")
    repo = make_proj_repo(tmp_path)
    (repo / "json.py").write_text("import sys\nraise SystemExit('the repository json.py says no')\n")
    commit_all(repo, "j")
    script = "echo one passed; sleep 0.5; echo two passed"
    with open_sandbox(RepoSource.local(repo), "local") as sb:
        assert sb.parses_in_run
        in_run = run_tests(sb, script, PARSER_LINES, timeout=30, parse_twice=True)
        monkeypatch.setattr(type(sb), "parses_in_run", property(lambda self: False))
        alone = run_tests(sb, script, PARSER_LINES, timeout=30, parse_twice=True)
    assert in_run.log == alone.log == "one passed\ntwo passed\n"
    assert in_run.parse_error == alone.parse_error
    assert "the repository json.py says no" in (in_run.parse_error or "")



def test_tests_that_end_before_the_shell_becomes_the_parser_keep_their_exit_code(tmp_path):
    """The shell reaps a job that ends before it execs the waiting script (quick tests on a busy machine:
    about one run in two under load did). The waiting script then takes the exit code the job wrote, and
    the parse still runs in the test command, rather than failing with ECHILD and leaving the parse (and a
    wrong exit code, its own) to the host. Here the shell's `sleep` makes the race certain. In a pid
    namespace of its own: the waiting script kills every process it can see."""
    import shutil
    import subprocess
    from importlib.resources import files

    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap for a pid namespace")
    ahead = files("ssrkit") / "templates" / "parse_ahead.py"
    log, status, rc, parser, flag = (tmp_path / n for n in ("log", "status", "rc", "parser.py", "flag"))
    parser.write_text(PARSER_LINES)
    parse = f"{parser} {log} 60 inf - - {flag} python3"
    driver = (f"t0=$(date +%s.%N); set -m; {{ echo one passed >{log}; r=7; echo $r >{rc}; exit $r; }} & "
              f"sleep 0.3; exec python3 {ahead} --after-tests $! $t0 60 {log} {status} 1000 {rc} {parse}")
    out = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "bash", "-c",
                          driver], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == '{"one": "passed"}', out.stderr
    assert status.read_text().split()[0] == "7"
