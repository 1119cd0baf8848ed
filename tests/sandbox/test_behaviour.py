"""One behavioural suite, run on every backend (see fixtures.sandboxes.BACKENDS)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time

import pytest

from ssrkit.errors import PatchError, SandboxError
from ssrkit.sandbox import PRISTINE


def token() -> str:
    """A unique `sleep` argument: lets us find a test's processes (and only them) afterwards."""
    return f"{random.randint(1000, 9999)}.{random.randint(10**5, 10**6 - 1)}"


def leftovers(sb, tok: str) -> list[str]:
    """Processes whose command line mentions `tok`, where the sandbox's processes live."""
    if sb.backend == "docker":
        out = sb.run("ps -eo args", timeout=30).output
        return [line for line in out.splitlines() if tok in line]
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if tok in line]


def wait_no_leftovers(sb, tok: str, within: float = 5.0) -> list[str]:
    deadline = time.monotonic() + within
    while True:
        left = leftovers(sb, tok)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def tree_digest(sb) -> str:
    """Every path, type, mode, symlink target and file hash under the root (.git included)."""
    res = sb.run(
        "find . -printf '%p %y %m %l\\n' | LC_ALL=C sort; "
        "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha1sum", timeout=60)
    assert res.ok, res.output
    return res.output


# -- running commands --------------------------------------------------------------------------------------

def test_exit_code_and_interleaved_output(opener, shared_repo):
    sb = opener(shared_repo)
    res = sb.run("echo one; echo two >&2; echo three; exit 3", timeout=30)
    assert res.exit_code == 3 and not res.ok and not res.timed_out
    assert res.output == "one\ntwo\nthree\n"
    assert sb.run("true", timeout=30).ok
    assert sb.run("exit 0", timeout=30).exit_code == 0


def test_runs_at_root_and_cwd(opener, shared_repo):
    sb = opener(shared_repo)
    assert sb.run("pwd", timeout=30).output.strip() == sb.root
    assert sb.run("pwd", timeout=30, cwd="src/pkg").output.strip() == f"{sb.root}/src/pkg"
    if sb.backend == "local" and sb.isolated:
        assert sb.root == str(shared_repo)  # the workspace appears at the original path


def test_stdin(opener, shared_repo):
    sb = opener(shared_repo)
    assert sb.run("cat", timeout=30, stdin="hello\nworld\n").output == "hello\nworld\n"
    data = bytes(range(256)) * 4
    res = sb.run("wc -c", timeout=30, stdin=data)
    assert res.output.strip() == str(len(data))
    assert sb.run("cat", timeout=30).output == ""  # no stdin: empty, never the terminal


def test_timeout_kills_whole_tree(opener, shared_repo):
    sb = opener(shared_repo)
    t = token()
    cmd = (f"sleep {t}1 & (sleep {t}2 & sleep {t}3 & wait) & bash -c 'sleep {t}4 & wait' & "
           f"setsid sleep {t}5 & nohup sleep {t}6 >/dev/null 2>&1 & sleep {t}7")
    start = time.monotonic()
    res = sb.run(cmd, timeout=1.5)
    assert res.timed_out and res.exit_code == 124 and not res.ok
    assert time.monotonic() - start < 10
    assert wait_no_leftovers(sb, t) == []


def test_background_children_do_not_outlive_the_command(opener, shared_repo):
    sb = opener(shared_repo)
    t = token()
    start = time.monotonic()
    res = sb.run(f"(sleep {t} &); sleep {t}9 & echo started", timeout=60)
    # the command returns as soon as its shell exits, although children still hold the output pipe
    assert res.ok and res.output.strip() == "started"
    assert time.monotonic() - start < 10
    assert wait_no_leftovers(sb, t) == []


@pytest.mark.xdist_group("timing")  # under xdist: a fork bomb beside no timed test
def test_fork_bomb_is_contained(opener, shared_repo):
    sb = opener(shared_repo, pids=64)
    t = token().replace(".", "_")
    start = time.monotonic()
    # the classic `:(){ :|:& };:`, with a name we can look for afterwards
    res = sb.run(f"bomb{t}() {{ bomb{t} | bomb{t} & }}; bomb{t}; sleep 2", timeout=4)
    assert time.monotonic() - start < 30
    # the pids limit made forks fail (bash says so and retries) or the timeout ended it
    assert res.timed_out or "Resource temporarily unavailable" in res.output, res.output[-500:]
    assert wait_no_leftovers(sb, f"bomb{t}", within=10) == []
    # the sandbox (and the machine) still work
    assert sb.run("echo alive", timeout=30).output.strip() == "alive"


def test_memory_hog_is_contained(opener, shared_repo):
    sb = opener(shared_repo, memory_mb=512)
    start = time.monotonic()
    res = sb.run("python3 -c \"x = ' ' * 10**11\"", timeout=60)
    assert not res.ok and not res.timed_out
    assert "MemoryError" in res.output or res.exit_code == 137
    assert time.monotonic() - start < 30
    assert sb.run("echo alive", timeout=30).output.strip() == "alive"


def test_network_is_blocked(opener, shared_repo):
    sb = opener(shared_repo)
    if sb.backend == "local" and not sb.isolated:
        pytest.skip("without bubblewrap the local backend has no network isolation (documented)")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        # the listener is reachable from here ...
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        # ... but not from inside, and neither is DNS
        probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                 "    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)\n"
                 "try:\n    socket.getaddrinfo('deb.debian.org', 80)\n    print('RESOLVED')\n"
                 "except OSError as e:\n    print('nodns', e)\n")
        res = sb.run("python3 -", timeout=60, stdin=probe)
        assert "refused" in res.output and "CONNECTED" not in res.output, res.output
        assert "nodns" in res.output and "RESOLVED" not in res.output, res.output
    finally:
        srv.close()


def test_huge_output_keeps_head_and_tail(opener, shared_repo):
    sb = opener(shared_repo, output_bytes=1 << 20)
    start = time.monotonic()
    res = sb.run("echo FIRST; head -c 50000000 /dev/zero | tr '\\0' a; echo; echo LAST", timeout=120)
    assert res.ok, res.output[-300:]
    assert res.truncated
    assert res.output.startswith("FIRST\naaaa")
    assert res.output.endswith("aaaa\nLAST\n")
    assert "bytes of output cut by ssrkit" in res.output
    assert len(res.output) < (1 << 20) + 200
    assert time.monotonic() - start < 60


def test_non_utf8_output_is_replaced(opener, shared_repo):
    sb = opener(shared_repo)
    res = sb.run("printf 'ok \\377\\376 done\\n'", timeout=30)
    assert res.ok
    assert res.output == "ok \ufffd\ufffd done\n"


# -- files, snapshots, patches ----------------------------------------------------------------------------

def test_write_and_read_files(opener, shared_repo):
    sb = opener(shared_repo)
    sb.write_file("new/dir/hello.txt", "hi there\n")
    assert sb.read_file("new/dir/hello.txt") == b"hi there\n"
    assert sb.run("cat new/dir/hello.txt", timeout=30).output == "hi there\n"
    sb.write_file("tool.sh", "#!/bin/sh\necho tool ran\n", mode=0o755)
    assert sb.run("./tool.sh", timeout=30).output == "tool ran\n"
    sb.write_file("tool.sh", "#!/bin/sh\necho tool ran again\n")  # rewriting keeps the mode
    assert sb.run("./tool.sh", timeout=30).output == "tool ran again\n"
    sb.write_file("run.sh", "#!/bin/sh\necho edited\n")
    assert sb.run("./run.sh", timeout=30).output == "edited\n"
    blob = bytes(range(256))
    sb.write_file(sb.scratch_path("blob.bin"), blob)
    assert sb.read_file(sb.scratch_path("blob.bin")) == blob
    assert sb.run(f"wc -c < {sb.scratch_path('blob.bin')}", timeout=30).output.strip() == "256"
    assert sb.read_file(f"{sb.root}/README.md").startswith(b"# proj")
    with pytest.raises(FileNotFoundError):
        sb.read_file("does/not/exist")
    with pytest.raises(SandboxError):
        sb.write_file("../escape.txt", "x")
    with pytest.raises(SandboxError):
        sb.read_file("/etc/passwd")


def test_user_state_is_reproduced(opener, shared_repo):
    """Uncommitted changes, untracked files and git-ignored generated files are all in the sandbox."""
    sb = opener(shared_repo)
    assert sb.read_file("src/pkg/_version.py") == b'VERSION = "1.2.3.dev0"\n'
    assert sb.read_file("build/out.txt") == b"generated\n"
    assert sb.read_file("notes.txt") == b"untracked notes\n"
    assert b"uncommitted line" in sb.read_file("README.md")
    res = sb.run("git status --porcelain --ignored", timeout=30)
    assert " M README.md" in res.output and "?? notes.txt" in res.output and "!! build/" in res.output
    assert sb.run("test -x run.sh && git log --oneline | wc -l", timeout=30).output.strip() == "2"


def test_original_is_never_touched(opener, shared_repo):
    before = subprocess.run(["bash", "-c", "find . -printf '%p %m %s %T@\\n' | sort"], cwd=shared_repo,
                            capture_output=True, text=True).stdout
    sb = opener(shared_repo)
    res = sb.run("rm -rf src tests build .git; echo x > README.md; touch new", timeout=30)
    assert res.ok
    after = subprocess.run(["bash", "-c", "find . -printf '%p %m %s %T@\\n' | sort"], cwd=shared_repo,
                           capture_output=True, text=True).stdout
    assert before == after
    sb.reset()
    assert sb.read_file("src/pkg/_version.py") == b'VERSION = "1.2.3.dev0"\n'


def test_snapshot_and_reset_are_exact(opener, shared_repo):
    sb = opener(shared_repo)
    pristine = tree_digest(sb)
    changes = (
        "echo changed >> src/pkg/core.py; "                       # modified tracked file
        "echo brand new > added.txt; mkdir -p a/b/c && echo deep > a/b/c/d.txt; "  # added files
        "rm tests/test_core.py; "                                 # deleted tracked file
        "rm build/out.txt; "                                      # deleted ignored file
        "echo 'VERSION = \"9\"' > src/pkg/_version.py; "          # modified ignored generated file
        "chmod 600 run.sh; chmod 700 src; "                       # mode changes
        "rm notes.txt && mkdir notes.txt && echo in > notes.txt/x; "  # file replaced by a directory
        "rm -rf build && echo file > build; "                     # directory replaced by a file
        "ln -s README.md link.md; "                               # new symlink
        "cp -p README.md /tmp/r && echo 'same size!' > README.md.tmp && "
        "printf '# proj\\n\\nuncommitted LINE\\n' > README.md && touch -r /tmp/r README.md; "  # same size+mtime
        "git add -A && git -c user.name=x -c user.email=x@x commit -qm wip"  # .git changes
    )
    res = sb.run(changes, timeout=60)
    assert res.ok, res.output
    changed = tree_digest(sb)
    assert changed != pristine
    sb.snapshot("work")
    sb.reset()
    assert tree_digest(sb) == pristine
    sb.reset("work")
    assert tree_digest(sb) == changed
    sb.run("rm -rf a; echo more >> added.txt", timeout=30)
    sb.reset("work")
    assert tree_digest(sb) == changed
    sb.reset(PRISTINE)
    assert tree_digest(sb) == pristine
    sb.reset(PRISTINE)  # resetting an unchanged tree is a no-op
    assert tree_digest(sb) == pristine
    # switching between snapshots with nothing run in between
    sb.reset("work")
    sb.reset(PRISTINE)
    sb.reset("work")
    assert tree_digest(sb) == changed
    sb.reset(PRISTINE)
    sb.snapshot("again")  # snapshot of an untouched tree
    sb.reset("work")
    sb.reset("again")
    assert tree_digest(sb) == pristine
    with pytest.raises(SandboxError, match="no snapshot named 'nope'"):
        sb.reset("nope")


def test_apply_patch(opener, shared_repo):
    sb = opener(shared_repo)
    diff = (
        "diff --git a/src/pkg/core.py b/src/pkg/core.py\n"
        "--- a/src/pkg/core.py\n"
        "+++ b/src/pkg/core.py\n"
        "@@ -1,3 +1,3 @@\n"
        " def add(a, b):\n"
        "-    return a + b\n"
        "+    return a - b\n"
        " \n"
    )
    sb.apply_patch(diff, label="bug_inject.diff")
    assert b"return a - b" in sb.read_file("src/pkg/core.py")
    with pytest.raises(PatchError, match=r"bug_inject.diff does not apply.*src/pkg/core.py"):
        sb.apply_patch(diff, label="bug_inject.diff")  # already applied: context no longer matches
    sb.apply_patch(diff, reverse=True)
    assert b"return a + b" in sb.read_file("src/pkg/core.py")


def test_diff_includes_new_files(opener, shared_repo):
    sb = opener(shared_repo)
    sb.write_file("src/pkg/extra.py", "X = 1\n")
    sb.run("sed -i 's/a + b/b + a/' src/pkg/core.py", timeout=30)
    d = sb.diff()
    assert "diff --git a/src/pkg/extra.py b/src/pkg/extra.py" in d and "new file mode" in d
    assert "+    return b + a" in d
    assert "uncommitted line" in d  # the user's uncommitted change is part of the tree's diff to HEAD
    # no intent-to-add entry is left in the index
    assert "?? src/pkg/extra.py" in sb.run("git status --porcelain", timeout=30).output


def test_fresh_history(opener, shared_repo):
    sb = opener(shared_repo)
    before = sb.run("cat src/pkg/core.py README.md notes.txt", timeout=30).output
    sb.fresh_history()
    assert sb.run("git log --oneline | wc -l", timeout=30).output.strip() == "1"
    assert sb.run("cat src/pkg/core.py README.md notes.txt", timeout=30).output == before
    assert sb.diff() == ""
    sb.write_file("fix.txt", "fix\n")
    assert "fix.txt" in sb.diff()


def test_secrets_are_not_visible(opener, shared_repo, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-from-host")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-secret-from-host")
    sb = opener(shared_repo, env={"OPENAI_API_KEY": "sk-secret-option", "FOO": "bar"})
    res = sb.run("env", timeout=30, env={"HF_TOKEN": "hf-secret-call", "BAZ": "qux"})
    assert "secret" not in res.output
    assert "FOO=bar" in res.output and "BAZ=qux" in res.output


def test_setup_runs_before_pristine(opener, shared_repo):
    sb = opener(shared_repo, setup="echo prepared > prepared.txt && rm notes.txt")
    sb.run("rm prepared.txt; echo x > notes.txt", timeout=30)
    sb.reset()
    assert sb.read_file("prepared.txt") == b"prepared\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("notes.txt")


def test_close_leaves_nothing(opener, shared_repo):
    sb = opener(shared_repo)
    sb.snapshot("extra")
    sb.run("echo x > y", timeout=30)
    if sb.backend == "docker":
        import docker

        name = sb.container.name
        sb.close()
        with pytest.raises(docker.errors.NotFound):
            docker.from_env().containers.get(name)
    else:
        d, cg = sb.dir, sb.cgroup
        sb.close()
        assert not os.path.exists(d)
        if cg is not None:
            assert not os.path.exists(cg.path)
    sb.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        sb.run("true", timeout=5)
