"""What makes one sandbox command cheap must not change what the command gets (issue 15).

Each backend runs every test (see fixtures.sandboxes.BACKENDS); the docker-only and local-only ones say so.
"""

from __future__ import annotations

import difflib
import os
import select
import signal
import sys
import time

import pytest

from ssrkit.errors import PatchError
from ssrkit.testrun import run_tests

#: under xdist: wall-clock bounds and a fork bomb, never beside another such test
pytestmark = pytest.mark.xdist_group("timing")

PARSER = """\
import json, sys
out = {}
for line in sys.stdin:
    name, _, status = line.strip().partition(" ")
    if status in ("passed", "failed"):
        out[name] = status
print(json.dumps(out))
"""


def limits_of(sb) -> dict[str, str]:
    res = sb.run("cat /proc/self/limits", timeout=30)
    assert res.ok, res.output
    out = {}
    for line in res.output.splitlines()[1:]:
        parts = line.split()
        # "Max file size  1048576  1048576  bytes": the name is everything before the two numbers
        for i, p in enumerate(parts):
            if p.isdigit() or p == "unlimited":
                out[" ".join(parts[:i])] = p
                break
    return out


def test_rlimits_are_exactly_the_limits(opener, shared_repo):
    if opener.backend == "docker":
        pytest.skip("docker sets its limits on the container")
    sb = opener(shared_repo, memory_mb=900, pids=77, file_size_mb=3, cpu_seconds=41)
    got = limits_of(sb)
    assert got["Max address space"] == str(900 << 20)
    assert got["Max processes"] == "77"
    assert got["Max file size"] == str(3 << 20)
    assert got["Max cpu time"] == "41"
    assert got["Max core file size"] == "0"
    # and the command itself runs in bash, as `$0` and bash-only syntax show
    res = sb.run('echo "$0"; [[ -n "$BASH_VERSION" ]] && echo bash', timeout=30)
    assert res.output.splitlines()[-1] == "bash", res.output


def test_a_file_beyond_the_size_limit_cannot_be_written(opener, shared_repo):
    if opener.backend == "docker":
        pytest.skip("docker sets its limits on the container")
    sb = opener(shared_repo, file_size_mb=1)
    res = sb.run("head -c 3000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin", timeout=30)
    assert "rc=0" not in res.output
    assert res.output.strip().splitlines()[-1] == str(1 << 20)


def test_interpreter_follows_a_shim_once(opener, shared_repo, tmp_path):
    """A version manager's shim is followed to the interpreter it runs; the answer is cached."""
    if opener.backend == "docker":
        pytest.skip("the shim lives on the host")
    shims = tmp_path / "mgr" / "shims"
    shims.mkdir(parents=True)
    (tmp_path / "mgr" / "libexec").mkdir()
    real = os.path.realpath(sys.executable)
    (shims / "python3").write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    os.chmod(shims / "python3", 0o755)
    sb = opener(shared_repo, env={"PATH": f"{shims}:/usr/bin:/bin"})
    first = sb.interpreter("python3")
    assert first == real
    assert sb.interpreter("python3") == first  # cached: no second command
    res = sb.run(f"{first} -c 'print(6 * 7)'", timeout=30)
    assert res.output.strip() == "42"


def test_interpreter_falls_back_to_the_name(opener, shared_repo):
    sb = opener(shared_repo)
    assert sb.interpreter("no-such-python-ssrkit") == "no-such-python-ssrkit"


def test_environment_changes_reach_the_view(opener, shared_repo, tmp_path):
    """The mount plan is cached per environment: a command with another toolchain on PATH sees it."""
    if opener.backend == "docker":
        pytest.skip("docker mounts nothing from the host")
    tool = tmp_path / "tool" / "bin"
    tool.mkdir(parents=True)
    (tool / "ssrkit-hello").write_text("#!/bin/sh\necho hello-from-tool\n")
    os.chmod(tool / "ssrkit-hello", 0o755)
    sb = opener(shared_repo)
    assert not sb.run("command -v ssrkit-hello", timeout=30).ok
    res = sb.run("ssrkit-hello", timeout=30, env={"PATH": f"{tool}:/usr/bin:/bin"})
    assert res.output.strip() == "hello-from-tool", res.output
    assert not sb.run("command -v ssrkit-hello", timeout=30).ok



def test_the_toolchain_is_worked_out_again_when_a_venv_changes(tmp_path):
    """`toolchain_dirs` is reused per environment while what it looked at is unchanged: a `pip install -e`
    (a new .pth file naming a directory outside the venv) in a venv already seen shows in the next answer."""
    from ssrkit.sandbox.local import toolchain_dirs

    venv = tmp_path / "venv"
    sp = venv / "lib" / "python3.99" / "site-packages"
    sp.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin", "VIRTUAL_ENV": str(venv)}
    assert toolchain_dirs(env) == [str(venv)]
    assert toolchain_dirs(env) == [str(venv)]  # reused
    src = tmp_path / "checkout" / "src"
    src.mkdir(parents=True)
    (sp / "__editable__.mypkg.pth").write_text(f"{src}\n")
    assert toolchain_dirs(env) == [str(venv), str(src)]
    (sp / "__editable__.mypkg.pth").write_text("/nowhere-ssrkit\n")  # rewritten in place: its own time changes
    assert toolchain_dirs(env) == [str(venv)]

# -- one command per test run ---------------------------------------------------------------------------

SCRIPT = 'echo "core.add passed"; grep -q "a - b" src/pkg/core.py && echo "core.sub passed" || echo "core.sub failed"\n'

def break_sub(repo) -> str:
    """A diff turning `sub` into `add` in the shared repository's core.py."""
    old = (repo / "src" / "pkg" / "core.py").read_text()
    new = old.replace("return a - b", "return a + b")
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 "a/src/pkg/core.py", "b/src/pkg/core.py")
    return "".join(lines)


def test_run_tests_applies_and_runs_in_one_command(opener, shared_repo):
    sb = opener(shared_repo)
    sb.interpreter("python3")
    calls = []
    real_run = sb.run

    def counting(command, **kw):
        calls.append(command)
        return real_run(command, **kw)

    sb.run = counting
    run = run_tests(sb, SCRIPT, PARSER, timeout=60, diffs=[("bug_inject.diff", break_sub(shared_repo))])
    assert run.statuses == {"core.add": "passed", "core.sub": "failed"}
    assert run.log == "core.add passed\ncore.sub failed\n"  # the applies print nothing into the log
    assert len(calls) == (1 if sb.parses_in_run else 2)  # apply + tests (+ the parser, where it may), parser
    sb.run = real_run
    assert sb.read_file("src/pkg/core.py").decode().count("a + b") == 2


def test_the_parser_in_the_test_command_sees_the_kept_log_alone(opener, shared_repo):
    """Where the parser runs in the test command, it parses what is kept as the log, after everything the
    tests started is dead: a leftover that keeps writing to the log (or to the command's output) cannot reach
    the parse."""
    sb = opener(shared_repo)
    leftover = ("setsid sh -c 'sleep 0.3; echo core.sub passed >> $0; echo core.add failed' "
                "\"$(readlink /proc/$$/fd/1)\" >/dev/null 2>&1 &\n")
    run = run_tests(sb, leftover + SCRIPT, PARSER, timeout=60)
    assert run.statuses == {"core.add": "passed", "core.sub": "passed"}
    assert run.log == "core.add passed\ncore.sub passed\n"
    import time

    time.sleep(0.6)  # the leftover, had it lived, would have written by now
    assert run_tests(sb, SCRIPT, PARSER, timeout=60).statuses == {"core.add": "passed", "core.sub": "passed"}


def test_a_script_that_kills_everything_still_gets_its_log_parsed(opener, shared_repo):
    sb = opener(shared_repo)
    if not sb.parses_in_run and sb.backend != "docker":
        pytest.skip("kill -9 -1 is only safe where the command has a pid namespace of its own")
    run = run_tests(sb, "echo core.add passed; kill -9 -1; sleep 1\n", PARSER, timeout=60)
    assert run.statuses == {"core.add": "passed"} and run.parse_error is None


def test_a_script_past_its_timeout_is_killed_and_its_log_parsed(opener, shared_repo):
    sb = opener(shared_repo)
    run = run_tests(sb, "echo core.add passed; setsid sleep 30 & sleep 30\n", PARSER, timeout=1.5)
    assert run.timed_out and run.exit_code == 124
    assert 1.4 < run.seconds < 10
    assert run.statuses == {"core.add": "passed"}


def test_a_log_replaced_by_a_fifo_does_not_hang(opener, shared_repo):
    sb = opener(shared_repo)
    fifo = 'f=$(readlink /proc/$$/fd/1); echo core.add passed; rm -f "$f" && mkfifo "$f" && ls -l "$f" >&2\n'
    run = run_tests(sb, fifo, PARSER, timeout=20)  # returns (a hang would block the host reading the log)
    assert run.seconds < 15
    assert run.statuses in ({}, {"core.add": "passed"}) or run.parse_error



def counted(sb):
    """`sb` with its commands listed (the list is returned; `sb.run` is restored by `del sb.run`)."""
    calls = []
    real_run = sb.run
    sb.run = lambda command, **kw: (calls.append(command), real_run(command, **kw))[1]
    return calls


def test_the_tests_get_the_signals_and_exit_codes_of_a_command_of_their_own(opener, shared_repo):
    """The test script runs as it would alone: SIGINT and SIGQUIT at their defaults (a test may interrupt
    itself), its exit code (a signal's as the shell reports it) and its time as they are."""
    sb = opener(shared_repo)
    script = ("python3 -c 'import signal, sys\n"
              "sys.exit(signal.getsignal(signal.SIGINT) is not signal.default_int_handler\n"
              "         or signal.getsignal(signal.SIGQUIT) != signal.SIG_DFL)' && echo core.add passed\n"
              "echo core.sub passed; sleep 0.3; exit 3\n")
    run = run_tests(sb, script, PARSER, timeout=60)
    assert run.statuses == {"core.add": "passed", "core.sub": "passed"}, (run.log, run.parse_error)
    assert run.exit_code == 3 and not run.timed_out
    assert 0.3 <= run.seconds < 5
    killed = run_tests(sb, "echo core.add passed; kill -SEGV $$\n", PARSER, timeout=60)
    assert killed.exit_code == 128 + 11 and killed.statuses == {"core.add": "passed"}


def test_the_tests_get_default_signals_even_when_ssrkit_ignores_them(opener, shared_repo):
    """ssrkit started with `&` from a script (or in a pytest-xdist worker) ignores SIGINT and SIGQUIT; ignored
    signals survive exec and a shell cannot un-ignore them, so without a reset in the spawned command the
    repository's tests could not interrupt themselves (the first fresh-clone run of this stop failed so)."""
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        sb = opener(shared_repo)
        script = ("python3 -c 'import signal, sys\n"
                  "sys.exit(signal.getsignal(signal.SIGINT) is not signal.default_int_handler\n"
                  "         or signal.getsignal(signal.SIGQUIT) != signal.SIG_DFL)' && echo core.add passed\n")
        run = run_tests(sb, script, PARSER, timeout=60)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert run.statuses == {"core.add": "passed"}, (run.log, run.parse_error)


def test_tests_that_signal_their_process_group_reach_nothing_of_the_run(opener, shared_repo):
    """In the one-command run the tests have a process group of their own, as under coreutils' `timeout`:
    signalling it reaches nothing that waits to parse, and the log is parsed in the same command."""
    sb = opener(shared_repo)
    if not sb.parses_in_run:
        pytest.skip("only the one-command run waits beside the tests")
    sb.interpreter("python3")
    calls = counted(sb)
    run = run_tests(sb, "trap '' TERM INT HUP; kill -TERM 0; kill -INT 0; kill -HUP 0; echo core.add passed\n",
                    PARSER, timeout=60)
    del sb.run
    assert run.statuses == {"core.add": "passed"} and run.exit_code == 0, (run.log, run.parse_error)
    assert len(calls) == 1


def test_what_the_tests_leave_where_the_run_writes_its_status_is_replaced(opener, shared_repo):
    """The one-command run writes the tests' exit code, times and log size to a scratch file after they end;
    a directory tree or a link the tests put there is removed first (nothing is written through a link)."""
    sb = opener(shared_repo)
    if not sb.parses_in_run:
        pytest.skip("only the one-command run writes a status file")
    status = sb.scratch_path("test_script.status")
    tree = (f"echo core.add passed; rm -rf {status}; mkdir -p {status}/a/b; touch {status}/a/b/f; "
            f"ln -s / {status}/a/root; chmod 500 {status}/a/b\n")
    link = f"echo core.add passed; rm -rf {status}; ln -s $PWD/src/pkg/core.py {status}\n"
    for script in (tree, link):
        calls = counted(sb)
        run = run_tests(sb, script, PARSER, timeout=60)
        del sb.run
        assert run.statuses == {"core.add": "passed"} and run.exit_code == 0, (script, run.parse_error)
        assert len(calls) == 1
        assert "a - b" in sb.read_file("src/pkg/core.py").decode()
        assert sb.read_file(status).decode().split()[0] == "0"


def test_a_diff_that_does_not_apply_names_itself_and_runs_nothing(opener, shared_repo):
    sb = opener(shared_repo)
    stale = break_sub(shared_repo).replace("return a - b", "return a - c")
    marker = "ssrkit-script-ran"
    with pytest.raises(PatchError) as e:
        run_tests(sb, f"echo x > {marker}\n", PARSER, timeout=60,
                  diffs=[("bug_inject.diff", break_sub(shared_repo)), ("test_weaken.diff", stale)])
    assert "test_weaken.diff" in str(e.value)
    assert "src/pkg/core.py" in str(e.value)
    with pytest.raises(FileNotFoundError):
        sb.read_file(marker)


def test_the_apply_marker_cannot_be_printed_by_accident(opener, shared_repo):
    """A test script printing something like the apply-failure line is just a log."""
    sb = opener(shared_repo)
    run = run_tests(sb, "echo ssrkit-apply-failed-0:0; echo core.add passed\n", PARSER, timeout=60,
                    diffs=[("bug_inject.diff", break_sub(shared_repo))])
    assert run.statuses == {"core.add": "passed"}
    assert run.log.startswith("ssrkit-apply-failed-0:0\n")


def test_apply_patches_is_one_command_and_names_the_failing_diff(opener, shared_repo):
    sb = opener(shared_repo)
    good = break_sub(shared_repo)
    stale = good.replace("return a - b", "return a - c")
    calls = []
    real_run = sb.run
    sb.run = lambda command, **kw: (calls.append(command), real_run(command, **kw))[1]
    with pytest.raises(PatchError) as e:
        sb.apply_patches([("bug_inject.diff", good), ("test_weaken.diff", stale)])
    assert e.value.label == "test_weaken.diff" and str(e.value).startswith("test_weaken.diff does not apply")
    assert len(calls) == 1
    sb.run = real_run
    sb.reset()
    sb.apply_patches([("bug_inject.diff", good), ("empty.diff", "")])
    assert "a + b" in sb.read_file("src/pkg/core.py").decode().split("def sub")[1]


# -- the prestarted sandbox (sandbox/_prestart.py): a command starts in a sandbox started ahead -----------

def prestarted_sandbox(opener, repo):
    sb = opener(repo)
    if not getattr(sb, "_ahead", None) or not sb._ahead.launched:
        pytest.skip("no prestarted sandbox here (it needs bubblewrap and a writable cgroup)")
    return sb


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_a_prestarted_command_gets_what_a_plain_one_gets(opener, shared_repo):
    sb = prestarted_sandbox(opener, shared_repo)
    probe = ("env | sort; pwd; ulimit -a; cat /proc/self/cgroup | sort; ls /proc | grep -c '^[0-9]'; "
             "echo fds $(ls /proc/self/fd); cat")
    extra = {"EXTRA": "it's \"quoted\"\nand two lines"}
    assert sb._ahead.launched[0].view is not None  # launched: the next command runs in it
    via_waiter = sb.run(probe, timeout=30, env=extra, stdin=b"in\n")
    sb._ahead.close()
    sb._ahead._new = lambda: None  # the next command takes the ordinary path
    plain = sb.run(probe, timeout=30, env=extra, stdin=b"in\n")
    sb._ahead._new = sb._new_joined
    assert via_waiter.ok and plain.ok, (via_waiter.output, plain.output)
    strip = lambda out: "\n".join(ln for ln in out.splitlines()  # noqa: E731
                                  if not ln.startswith(("HOME=", "_=")))
    assert strip(via_waiter.output) == strip(plain.output)
    assert via_waiter.output.endswith("in\n") and "fds 0 1 2 3\n" in via_waiter.output  # (3: ls's own)
    value = "it's \"quoted\"\nand $two lines"
    assert sb.run('printf %s "$EXTRA"', timeout=30, env={"EXTRA": value}).output == value
    assert sb.run("cat", timeout=30, stdin=b"piped in\n").output == "piped in\n"
    assert sb.run("cat", timeout=30).output == ""
    assert sb.run("pwd", timeout=30, cwd="src").output == f"{sb.root}/src\n"
    missing = sb.run("pwd", timeout=30, cwd="no/such/dir")
    assert missing.exit_code == 1 and "no/such/dir does not exist" in missing.output


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_the_waiting_sandbox_is_out_of_the_commands_reach(opener, shared_repo):
    """A command cannot see the sandbox waiting for the next one; what it leaves behind dies, the waiting
    sandbox does not, and the next command runs in it with nothing of the last."""
    sb = prestarted_sandbox(opener, shared_repo)
    assert sb.run("true", timeout=30).ok  # two commands in a row: the third's sandbox starts during the second
    cmdlines = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
    res = sb.run(f"setsid sh -c 'sleep 300' >/dev/null 2>&1 & kill -9 -1; {cmdlines}", timeout=30)
    assert res.output.strip() and "ssrkit-prestart" not in res.output
    assert res.output.count("read -r go") <= 1  # its own sandbox's init, nothing else's
    waiter = sb._ahead.launched[0] if sb._ahead.launched else None
    assert waiter is not None and waiter.proc.poll() is None and waiter.view is not None
    # it started while the command ran: on a loaded machine it may say it is ready only now
    poller = select.poll()
    poller.register(waiter.r, select.POLLIN)
    assert poller.poll(10_000), "the waiting sandbox never said it is ready"
    from ssrkit.sandbox._cgroup import _exiting

    left = [p for p in sb.cgroup.pids() if not _exiting(p)]  # an exiting process is dead (kill_all), if listed
    assert waiter.pid in left and set(left) == sb._ahead.spared(left, None)  # the sleeper is gone, the waiting are all
    after = sb.run(cmdlines, timeout=30)
    assert after.ok and "sleep 300" not in after.output and "ssrkit-prestart" not in after.output


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_a_reset_starts_a_new_waiting_sandbox_that_sees_the_reset(opener, shared_repo):
    sb = prestarted_sandbox(opener, shared_repo)
    sb.snapshot("clean")
    assert sb.run("echo gone > new_file; echo x > $HOME/h; echo y > /tmp/t", timeout=30).ok
    assert sb.run("true", timeout=30).ok and sb._ahead.launched  # in a row: the next ones wait
    old = list(sb._ahead.launched)
    sb.reset("clean")
    assert all(w.proc.wait(timeout=5) == -9 for w in old)
    assert len(sb._ahead.launched) == 1 and sb._ahead.launched[0] not in old
    res = sb.run("ls new_file $HOME/h /tmp/t 2>&1; echo hi > /tmp/t; cat /tmp/t", timeout=30)
    assert res.output.count("No such file") == 3 and res.output.endswith("hi\n"), res.output


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_waiting_sandboxes_outlive_the_thread_that_used_the_sandbox(opener, shared_repo):
    """bubblewrap's --die-with-parent fires when the thread that forked it ends: the waiting processes are
    started by a thread that lives as long as the process, so a sandbox used from short-lived threads (as
    --jobs workers use them) finds them alive."""
    import threading

    sb = prestarted_sandbox(opener, shared_repo)
    for _ in range(3):
        def use_and_end():  # a worker's last steps: a command, and a reset with nothing in the reserve
            sb.run("true", timeout=30)
            sb._ahead.close()
            sb.reset()
            select.select([sb._ahead.launched[0].r], [], [], 10)  # it is bubblewrap now
        t = threading.Thread(target=use_and_end)
        t.start()
        t.join()
        time.sleep(0.2)
        waiting = sb._ahead.launched[0]
        assert waiting.proc.poll() is None, "the waiting sandbox died with the thread that made it"
        res = sb.run("echo alive", timeout=30)
        assert res.ok and res.output == "alive\n", res


_FORKED = """\
import os, signal, sys
from ssrkit.sandbox.local import LocalSandbox

sb = LocalSandbox(sys.argv[1], isolation="bwrap")
print(bool(sb._ahead.launched), sb.run("echo parent", timeout=30).output.strip(), flush=True)
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hang ends as SIGALRM, not as a stuck test
    with LocalSandbox(sys.argv[1], isolation="bwrap") as child:
        print(child.run("echo child", timeout=30).output.strip(), child.run("echo again", timeout=30).output.strip(),
              flush=True)
    os._exit(0)
print("child exit", os.waitpid(pid, 0)[1], flush=True)
sb.close()
"""


def test_a_forked_child_opens_and_runs_sandboxes_of_its_own(shared_repo):
    """The waiting sandboxes are started by one thread per process: a child forked after the parent used a
    sandbox (multiprocessing's default start on Linux) has a starter of its own, not the parent's executor
    whose thread it lacks (its first sandbox then waited forever)."""
    import subprocess

    from ssrkit.sandbox.local import isolation_available

    if isolation_available():
        pytest.skip(f"bubblewrap unusable here: {isolation_available()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _FORKED, str(shared_repo)], capture_output=True, text=True,
                         timeout=120, env=env)
    lines = out.stdout.splitlines()
    if lines and lines[0] == "False parent":
        pytest.skip("no prestarted sandbox here (it needs bubblewrap and a writable cgroup)")
    assert lines == ["True parent", "child again", "child exit 0"], (out.stdout, out.stderr)


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_a_fork_bomb_while_the_next_sandboxes_start_leaves_the_next_command_whole(opener, shared_repo):
    """The waiting sandboxes share the cgroups' pid and memory budget with the command that runs while they
    start: one that exhausts it may break them, never the next command (it starts the ordinary way)."""
    sb = prestarted_sandbox(opener, shared_repo)
    count = "set -- /proc/[0-9]*; echo $#"  # bash alone: a pipe's two ends could each see the other or not
    alone = int(sb.run(count, timeout=30).output)  # in a row from here: the next sandboxes start in the bomb
    bomb = sb.run("b() { b | b & }; b; sleep 30", timeout=3)  # ends by its timeout (a `sleep 3` could win the race)
    assert not bomb.ok
    for word in ("after", "and again"):
        res = sb.run(f"echo {word}; {count}", timeout=30)
        assert res.ok and res.output.split("\n")[0] == word, res
        assert int(res.output.split("\n")[1]) == alone  # nothing of the bomb is left
    from ssrkit.sandbox._cgroup import _exiting

    live = {p for p in sb.cgroup.pids() if not _exiting(p)}  # an exiting process is dead (kill_all)
    assert live == sb._ahead.spared(sorted(live), None)


@pytest.mark.parametrize("opener", ["local-bwrap"], indirect=True)
def test_a_dead_waiting_sandbox_falls_back_to_a_plain_start(opener, shared_repo):
    sb = prestarted_sandbox(opener, shared_repo)
    os.kill(sb._ahead.launched[0].pid, 9)
    sb._ahead.launched[0].proc.wait()
    res = sb.run("echo still works", timeout=30)
    assert res.ok and res.output == "still works\n"
    sb._ahead._making.result()
    assert sb._ahead.joined and all(w.proc.poll() is None for w in sb._ahead.joined)  # they wait, behind
    assert sb.run("echo and again", timeout=30).output == "and again\n"
    d = sb.dir
    sb.close()
    assert not os.path.exists(d)


@pytest.mark.parametrize("opener", ["local-bwrap", "local-none"], indirect=True)
def test_write_file_over_a_fifo_a_command_left_does_not_block(opener, shared_repo):
    sb = opener(shared_repo)
    target = sb.scratch_path("test_parser.py")
    assert sb.run(f"mkfifo {target}", timeout=30).ok
    sb.write_file(target, "print('{}')\n")  # returns: the FIFO is replaced, not opened
    assert sb.read_file(target) == b"print('{}')\n"
    assert sb.run(f"test -f {target} && ! test -p {target}", timeout=30).ok


@pytest.mark.parametrize("opener", ["local-bwrap", "local-none"], indirect=True)
def test_read_file_of_a_fifo_a_command_left_does_not_block(opener, shared_repo):
    sb = opener(shared_repo)
    assert sb.run(f"mkfifo {sb.scratch_path('rc')} left.fifo", timeout=30).ok
    for path in (sb.scratch_path("rc"), "left.fifo"):
        with pytest.raises(OSError, match="not a regular file"):
            sb.read_file(path)
    with pytest.raises(OSError):
        sb.read_capped(sb.scratch_path("rc"))
