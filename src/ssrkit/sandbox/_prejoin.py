"""A process already inside a sandbox's cgroups, waiting to become the sandbox's next command.

Moving a process into a cgroup (writing its pid to `cgroup.procs`) waits for an RCU grace period on most
kernels (cgroup v1, and v2 without `favordynmods`): 5-15 ms per hierarchy on an idle machine, paid by
every command whose wrapper joins the sandbox's cgroups before bubblewrap starts — more than bubblewrap
itself costs. A `Prejoined` process pays it while the previous command runs: it joins the cgroups, says
so (one byte, `R`, on its output pipe), and waits on its stdin. To run a command the sandbox writes it as
a shell script (environment, directory, stdin redirection, then `exec` of the bubblewrap argv) into its
private io directory, says go, and the process sources the script: it *becomes* the command, already a
member of the cgroups, and its output pipe is the command's.

Only used under bubblewrap: the command's processes live in their own pid namespace and cannot see,
signal or feed the waiting process. Anything unexpected (the process died, never said it was ready) makes
`start` return False, and the sandbox starts the command the ordinary way.
"""

from __future__ import annotations

import fcntl
import os
import select
import shlex
import signal
import subprocess
import uuid
from typing import Mapping, Sequence

_F_SETPIPE_SZ = 1031
READY = b"R"


class Prejoined:
    """One waiting process; `start` hands it a command, `discard` kills it unused."""

    def __init__(self, procs_files: Sequence[str], io_dir: str, shell: str = "/bin/sh", prelude: str = "") -> None:
        """`shell` waits; `prelude` (in its words: the rlimits) runs just before the command is exec'd."""
        self.prelude = prelude
        self.script = os.path.join(io_dir, f"run-{uuid.uuid4().hex[:12]}.sh")
        joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs_files)))
        body = f"{joins} && printf {READY.decode()} && read -r go && . \"$0\""
        r, w = os.pipe()
        go_r, go_w = os.pipe()
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        try:
            self.proc = subprocess.Popen([shell, "-c", body, self.script, *procs_files], stdin=go_r,
                                         stdout=w, stderr=w, env={}, cwd="/", start_new_session=True,
                                         close_fds=True)
        except OSError:
            os.close(r)
            os.close(go_w)
            raise
        finally:  # the process holds its ends now (or there is none)
            os.close(w)
            os.close(go_r)
        self.r: int | None = r
        self._go: int | None = go_w

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, stdin_path: str | None,
              ready_timeout: float = 5.0) -> bool:
        """Make the waiting process run `argv`; False (and nothing started) when it is not ready. After True,
        `proc` is the command and `r` its output pipe (the caller's to close)."""
        if self.r is None or self._go is None or self.proc.poll() is not None:
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
        lines = [f"export {shlex.quote(f'{k}={v}')}" for k, v in env.items() if _is_name(k)]
        if cwd != "/":  # it waits in /
            lines.append(f"cd {shlex.quote(cwd)} || exit 126; unset OLDPWD")
        if self.prelude:
            lines.append(self.prelude)
        redirect = shlex.quote(stdin_path) if stdin_path else "/dev/null"
        lines.append("exec " + " ".join(shlex.quote(a) for a in argv) + f" <{redirect}")
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
        """After the command ran: forget its script."""
        try:
            os.unlink(self.script)
        except OSError:
            pass

    def discard(self) -> None:
        """Kill the process unused and release everything it holds."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
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


def _is_name(key: str) -> bool:
    return bool(key) and (key[0].isalpha() or key[0] == "_") and all(c.isalnum() or c == "_" for c in key)
