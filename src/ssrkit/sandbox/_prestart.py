"""The sandbox's next command, started ahead: a bubblewrap sandbox inside the cgroups, waiting for its command.

Two costs come before a command's first instruction: joining the sandbox's cgroups (writing a pid to
`cgroup.procs` waits for an RCU grace period on most kernels: 5-15 ms per hierarchy on an idle machine) and
bubblewrap's own start (its namespaces and the 20-odd mounts of the view: 8-10 ms in a VM). Both are paid
ahead, in two steps. A `Prestarted` process is a shell that joins the cgroups at once and waits on its stdin
(this survives resets: it is nothing yet). `launch` makes it set the rlimits and become bubblewrap with the
view the next command will most likely get; inside, a shell says it is ready (one byte, `R`, on the output
pipe) and waits on the same stdin. To run a command the sandbox writes it as a shell script (environment,
directory, then `exec` of bash on the command) into the file the waiting shell holds open as fd 3, its stdin
into the file held as fd 4, and says go: the shell sources the script and becomes the command, with the
output pipe that is the command's.

Every command still gets a sandbox of its own, pid namespace included: one is launched for each command and
never runs two. A launched sandbox stands on what the sandbox was when it started, so the sandbox discards it
whenever that changes (a reset mounts a new workspace and makes new HOME and /tmp) or when a command asks for
another view (`view` differs). The commands cannot see, signal or feed a waiting process (another pid
namespace; its files live in the sandbox's private io directory, and the fds it holds are closed before the
command starts). Anything unexpected (it died, it never said it was ready) makes `start` return False, and
the sandbox starts the command the ordinary way.
"""

from __future__ import annotations

import fcntl
import os
import select
import shlex
import signal
import subprocess
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Mapping, Sequence

from ._procfs import stat_fields


def signals_as_alone() -> Callable[[], None] | None:
    """What a command needs to start with SIGINT and SIGQUIT at their defaults, as from a terminal, when ssrkit
    itself ignores them (started with `&` from a script, under nohup-like wrappers, in a pytest-xdist worker):
    ignored signals survive exec, and a shell cannot un-ignore what it was started ignoring, so the repository's
    tests would run unable to interrupt themselves. None (the fast spawn path) when nothing is ignored."""
    ignored = [s for s in (signal.SIGINT, signal.SIGQUIT) if signal.getsignal(s) == signal.SIG_IGN]
    if not ignored:
        return None

    def reset() -> None:  # in the child, before exec
        for s in ignored:
            signal.signal(s, signal.SIG_DFL)
    return reset

_F_SETPIPE_SZ = 1031
#: the one thread that starts every waiting process. bubblewrap's `--die-with-parent` is a parent-death
#: signal, and that fires when the *thread* that forked the process ends: a waiting sandbox started from a
#: short-lived thread (a `--jobs` worker, a refill) would be SIGKILLed whenever that thread went away. This
#: thread lives until the interpreter's exit, which waits for what it is doing.
_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssrkit-prestart")


def _new_starter() -> None:
    """In a forked child: a starter of its own. The parent's thread does not exist there, and its executor,
    which counts it, would never run a task: the child's first sandbox would wait forever."""
    global _STARTER
    _STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssrkit-prestart")


os.register_at_fork(after_in_child=_new_starter)
READY = b"R"
#: the shell inside the sandbox: ready, wait for go, become the command's script (fd 3, reopened)
_INSIDE = f"printf {READY.decode()} && read -r go && . /proc/self/fd/3"


class Prestarted:
    """One process waiting in the cgroups; `launch` makes it a waiting sandbox, `start` hands that sandbox a
    command, `discard` kills it unused."""

    def __init__(self, procs_files: Sequence[str], io_dir: str, bash: str, shell: str = "/bin/sh",
                 prelude: str = "") -> None:
        """`shell` joins the cgroups, waits, runs `prelude` (in its words: the rlimits, inherited from then on)
        and becomes bubblewrap; `bash` runs the command inside."""
        self.bash, self.prelude, self.shell = bash, prelude, shell
        self.view: list[str] | None = None  # the bubblewrap argv, once launched
        self.cwd = "/"
        tag = uuid.uuid4().hex[:12]
        self.script = os.path.join(io_dir, f"run-{tag}.sh")
        self.stdin = os.path.join(io_dir, f"stdin-{tag}")
        self.launcher = os.path.join(io_dir, f"launch-{tag}.sh")
        for path in (self.script, self.stdin):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        joins = " && ".join(f'echo $$ > "${i + 4}"' for i in range(len(procs_files))) or "true"
        body = f'exec 3<"$1" 4<"$2" && {joins} && read -r launch && . "$3"'
        r, w = os.pipe()
        go_r, go_w = os.pipe()
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        try:
            self.proc = subprocess.Popen([shell, "-c", body, "ssrkit-prestart", self.script, self.stdin,
                                          self.launcher, *procs_files], stdin=go_r, stdout=w, stderr=w, env={},
                                         cwd="/", start_new_session=True, close_fds=True,
                                         preexec_fn=signals_as_alone())
        except OSError:
            os.close(r)
            os.close(go_w)
            self.done()
            raise
        finally:  # the process holds its ends now (or there is none)
            os.close(w)
            os.close(go_r)
        self.r: int | None = r
        self._go: int | None = go_w

    def launch(self, bwrap: Sequence[str], view: list[str], cwd: str) -> bool:
        """Become the sandbox `bwrap` + `view` (in `cwd`), waiting for its command (once its cgroups are
        joined); False when the process is gone."""
        if self._go is None or self.view is not None or self.proc.poll() is not None:
            return False
        argv = [*bwrap, *view, "--chdir", cwd, "--", self.shell, "-c", _INSIDE, "ssrkit-sandbox"]
        with open(self.launcher, "w") as fh:
            fh.write(f"{self.prelude} exec " + " ".join(shlex.quote(a) for a in argv) + "\n")
        try:
            os.write(self._go, b"launch\n")
        except OSError:
            return False
        self.view, self.cwd = view, cwd
        return True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, command: str, env: Mapping[str, str], cwd: str, stdin: bytes | None,
              ready_timeout: float = 5.0) -> bool:
        """Make the waiting sandbox run `command` in `cwd` with exactly `env` and `stdin` (None: /dev/null);
        False (and nothing started) when it is not ready. After True, `proc` is the command and `r` its output
        pipe (the caller's to close)."""
        if self.r is None or self._go is None or self.view is None or self.proc.poll() is not None:
            return False
        poller = select.poll()
        poller.register(self.r, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(int(ready_timeout * 1000)):
            return False
        try:
            if os.read(self.r, 1) != READY:
                return False
        except OSError:
            return False
        lines = ["exec 3<&-"]
        lines += [f"export {shlex.quote(f'{k}={v}')}" for k, v in env.items() if _is_name(k)]
        if cwd != self.cwd:
            q = shlex.quote(cwd)
            lines.append(f"cd {q} 2>/dev/null || {{ printf 'ssrkit: working directory %s does not exist\\n' "
                         f"{q} >&2; exit 1; }}")
        lines.append("unset OLDPWD")
        if stdin is not None:
            with open(self.stdin, "wb") as fh:
                fh.write(stdin)
        redirect = "/proc/self/fd/4 4<&-" if stdin is not None else "/dev/null 4<&-"
        lines.append(f"exec {shlex.quote(self.bash)} -c {shlex.quote(command)} <{redirect}")
        with open(self.script, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        try:
            os.write(self._go, b"go\n")
        except OSError:  # it died meanwhile
            return False
        finally:
            os.close(self._go)
            self._go = None
        return True

    def done(self) -> None:
        """After the command ran: forget its files."""
        for path in (self.script, self.stdin, self.launcher):
            try:
                os.unlink(path)
            except OSError:
                pass

    def kill(self) -> None:
        """SIGKILL the waiting process (bubblewrap's children die with it: `--die-with-parent`)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def discard(self) -> None:
        """Kill the waiting process unused and release everything it holds."""
        self.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.r, self._go):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.r = self._go = None
        self.done()


def _ppid(pid: int) -> int:
    rest = stat_fields(pid)
    try:
        return int(rest[1]) if rest is not None else -1
    except (ValueError, IndexError):
        return -1


def _is_name(key: str) -> bool:
    return bool(key) and (key[0].isalpha() or key[0] == "_") and all(c.isalnum() or c == "_" for c in key)


class Ahead:
    """A sandbox's waiting processes: `launched` sandboxes (oldest first), and behind them a reserve of
    `Prestarted` processes that joined the cgroups long ago (a join waits for an RCU grace period, longer than
    bubblewrap's start). The reserve is refilled, and killed processes reaped, on the starter thread after a
    command ended: a start costs the host 1-2 ms that would otherwise come between a command and its output."""

    def __init__(self, new: Callable[[], Prestarted | None],
                 launch_args: Callable[[], tuple[Sequence[str], list[str], str]], reserve: int = 2) -> None:
        """`new`: a fresh `Prestarted` (None when none can be made); `launch_args`: (bwrap, view, cwd) of the
        next command's most likely sandbox."""
        self._new, self._launch_args, self._reserve = new, launch_args, reserve
        self.launched: list[Prestarted] = []
        self.joined: list[Prestarted] = []
        self._dying: list[Prestarted] = []
        self._lock = threading.Lock()
        self._making: Future | None = None
        self._closed = False

    def fill(self, depth: int = 1, wait: bool = True) -> None:
        """Have `depth` sandboxes launched, from the reserve; with `wait`, a process made now when the reserve
        is empty and none is launched (the next command is about to start)."""
        while len(self.launched) < depth:
            with self._lock:
                w = self.joined.pop(0) if self.joined else None
            if w is None and wait and not self.launched:
                w = _STARTER.submit(self._new).result()
            if w is None:
                return
            if not w.launch(*self._launch_args()):
                self._bury([w])
                continue
            self.launched.append(w)

    def take(self) -> Prestarted | None:
        """The oldest launched sandbox, now the caller's (None when there is none)."""
        return self.launched.pop(0) if self.launched else None

    def drop_launched(self) -> None:
        """Kill the launched sandboxes (they show a state of the sandbox that is gone); reaped later."""
        gone, self.launched = self.launched, []
        self._bury(gone)

    def _bury(self, gone: list[Prestarted]) -> None:
        for w in gone:
            w.kill()
        with self._lock:
            self._dying += gone

    def refill(self) -> None:
        """On the starter thread: reap the killed, and make the reserve whole."""
        if self._closed or (self._making is not None and not self._making.done()):
            return
        self._making = _STARTER.submit(self._refill)

    def _refill(self) -> None:
        with self._lock:
            dying, self._dying = self._dying, []
        for w in dying:
            w.discard()
        while len(self.joined) < self._reserve:
            w = self._new()
            if w is None:
                return
            with self._lock:
                self.joined.append(w)

    def close(self) -> None:
        """Kill and reap every waiting process; no refill after (the sandbox is closing)."""
        self._closed = True
        if self._making is not None:
            self._making.exception()  # waits; what went wrong in a refill only left the reserve short
        with self._lock:
            gone = self.launched + self.joined + self._dying
            self.launched, self.joined, self._dying = [], [], []
        for w in gone:  # all killed first: their namespaces are torn down at once
            w.kill()
        for w in gone:
            w.discard()

    @staticmethod
    def spared(pids: Sequence[int], running: int | None) -> set[int]:
        """Of the cgroups' `pids`, those of the waiting processes, kept when a command's leftovers die: the
        host's own children but `running` (the command's process), and everything below them. Nothing a
        command starts is the host's child, and a process being made this moment is kept too."""
        parent = {p: _ppid(p) for p in pids}
        host = os.getpid()
        keep = {p for p, pp in parent.items() if pp == host and p != running}
        grew = True
        while grew:
            grew = False
            for p, pp in parent.items():
                if p not in keep and pp in keep:
                    keep.add(p)
                    grew = True
        return keep
