"""The `docker` backend: one container per sandbox, commands via exec (SPEC §3).

The container runs a reaping keeper loop as pid 1 (`sleep` + `wait`, so orphans never pile up as zombies),
with the network disabled and memory / pids / CPU limits. Every command runs through a bash wrapper that
merges stderr into stdout, sets rlimits (file size, CPU seconds, no core dumps) and, when the command is
done, kills every process left in the container except pid 1 (`kill -9 -1`): no command outlives itself.
The timeout is enforced from Python: when it expires a second exec kills everything the same way; if the
container cannot even start an exec (a fork bomb holding every pid), the container is restarted (its
filesystem survives a restart). Snapshots live in `/.ssrkit/snaps`: with python3 >= 3.9 in the image,
`_tree.py` runs inside the container (incremental, exact: hard-linked snapshot trees, ctime manifest, only
changed files copied back); otherwise a snapshot is a `cp -a` copy and reset deletes the tree and copies the
snapshot back. Either way ignored and generated files are restored too.

Containers carry the labels `ssrkit.sandbox=1`, `ssrkit.pid`, `ssrkit.host` and `ssrkit.run` (the run,
`_cleanup.run_id()`); they are removed by `close()`, at interpreter exit, on Ctrl-C/SIGTERM, containers of
dead ssrkit processes on this host are swept when the next sandbox starts, and `reap.py` removes a whole
run's (`remove_run`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import select
import shlex
import socket
import struct
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from ..errors import SandboxError
from ..store.source import DEFAULT_WORKDIR
from . import _cleanup
from . import _tree as _tree_mod
from . import timeouts
from .base import PRISTINE, ExecResult, FileTooLargeError, Sandbox, SandboxOptions
from .capture import TIMEOUT_EXIT_CODE, OutputCapture, decode_output
from .env import is_secret_name

log = logging.getLogger("ssrkit.sandbox")

STATE = "/.ssrkit"
_HELPER = f"{STATE}/ssrkit_tree.py"
# pid 1: reaps every orphan (the shell's `wait` collects any child) and keeps one marked `sleep` alive
_KEEPER_ARG = "86399.999"
_KEEPER = f"trap '' TERM INT HUP; while :; do sleep {_KEEPER_ARG} & wait; done"
# bash: SIGKILL every process except pid 1, the keeper's sleep, zombies and the calling shell; repeat until
# nothing is left (a fork bomb needs several rounds); prints how many processes are still alive
_KILL_FN = (
    "_ssrkit_kill() { local n=0 d p a b s; for d in /proc/[0-9]*; do p=${d#/proc/}; "
    "[[ $p == 1 || $p == $$ || $p == $BASHPID ]] && continue; "
    "{ IFS= read -r -d '' a; IFS= read -r -d '' b; } 2>/dev/null < \"$d/cmdline\"; "
    f"[[ $a == sleep && $b == {_KEEPER_ARG} ]] && continue; "
    "IFS= read -r s 2>/dev/null < \"$d/stat\" || continue; s=${s##*) }; [[ ${s:0:1} == Z ]] && continue; "
    "kill -9 \"$p\" 2>/dev/null && n=$((n+1)); done; ((n > 0)); }; "
    "_ssrkit_killall() { local i=0; while _ssrkit_kill && ((i++ < 300)); do :; done; }; "
)
_KILL_ALL = _KILL_FN + "_ssrkit_killall 2>/dev/null; _ssrkit_kill 2>/dev/null && echo left || echo clean"
# stdout carries the command's output (stderr merged into it); the exit code comes back on stderr
_WRAPPER = (
    'exec 3>&2 2>&1; ulimit -c 0 2>/dev/null; {limits}'
    'cd "$1" || {{ echo "ssrkit:rc=1" >&3; exit 1; }}; '
    'if [ -n "$3" ]; then "$BASH" -c "$2" < "$3" 3>&-; else "$BASH" -c "$2" < /dev/null 3>&-; fi; rc=$?; '
    '[ -n "$3" ] && rm -f "$3"; '
) + _KILL_FN + '_ssrkit_killall 2>/dev/null; echo "ssrkit:rc=$rc" >&3; exit $rc'

_BASE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "SSRKIT_SANDBOX": "docker",
}

_HOST = socket.gethostname()
RUN_LABEL = "ssrkit.run"
_swept = False
_swept_lock = threading.Lock()


def _docker_module():
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise SandboxError("the `docker` Python package is not installed (pip install docker)") from None
    import docker

    return docker


def client(timeout: int = 120):
    """A Docker client, or SandboxError saying how to get one."""
    docker = _docker_module()
    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
        return c
    except Exception as e:  # noqa: BLE001 - any failure means: no engine
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise SandboxError(
            f"Docker engine not reachable at {host} ({msg}): start Docker or use --backend local") from None


def docker_available() -> str | None:
    """None when a Docker engine answers, else the reason."""
    try:
        client(timeout=10).close()
    except SandboxError as e:
        return str(e)
    return None


def _remove_containers(c, label: str, doomed=lambda cont: True) -> int:
    """Remove the sandbox containers carrying `label` (key=value) for which `doomed(container)` holds."""
    n = 0
    try:
        conts = c.containers.list(all=True, filters={"label": ["ssrkit.sandbox=1", label]})
    except Exception:  # noqa: BLE001
        return 0
    for cont in conts:
        if doomed(cont):
            try:
                cont.remove(force=True, v=True)
                n += 1
            except Exception:  # noqa: BLE001 - gone already
                pass
    return n


def _owner_dead(cont) -> bool:
    try:
        pid = int(cont.labels.get("ssrkit.pid", "0"))
    except ValueError:
        return False
    return bool(pid) and pid != os.getpid() and not _cleanup.pid_alive(pid)


def sweep_stale(c) -> int:
    """Remove sandbox containers left by ssrkit processes of this host that no longer exist."""
    return _remove_containers(c, f"ssrkit.host={_HOST}", _owner_dead)


def remove_run(c, run: str) -> int:
    """Remove every sandbox container of run `run` on this engine, whichever process or host made it."""
    return _remove_containers(c, f"{RUN_LABEL}={run}")


def _snap_dir(name: str) -> str:
    return f"{STATE}/snaps/s-{hashlib.sha1(name.encode()).hexdigest()[:16]}"


class DockerSandbox(Sandbox):
    backend = "docker"

    def __init__(self, image: str, workdir: str = DEFAULT_WORKDIR, options: SandboxOptions | None = None, *,
                 docker_client=None) -> None:
        global _swept
        _cleanup.check_running()
        self.options = options or SandboxOptions()
        self.limits = self.options.limits
        self.image = image
        self.root = posixpath.normpath(workdir)
        self.scratch = f"{STATE}/scratch"
        self._lock = threading.RLock()
        self._closed = False
        self._snaps: set[str] = set()
        self._n = 0
        self._ran = False
        self._tree_helper = False
        self._clean: str | None = None  # the snapshot the tree equals while nothing touched it
        self.container = None
        self.client = docker_client or client()
        docker = _docker_module()
        with _swept_lock:
            if not _swept:
                _swept = True
                sweep_stale(self.client)
        try:
            img = self.client.images.get(image)
        except docker.errors.ImageNotFound:
            raise SandboxError(f"Docker image {image!r} not found: build it with `ssrkit image build REPO`"
                               f" (or `docker pull` it)") from None
        except docker.errors.APIError as e:
            raise SandboxError(f"cannot inspect Docker image {image!r}: {e.explanation or e}") from None
        env = dict(_BASE_ENV)
        env["HOME"] = f"{STATE}/home"  # private, emptied with /tmp by every reset
        for k, v in self.options.env.items():
            if not is_secret_name(k):
                env[k] = v
        self._image_env = img.attrs.get("Config", {}).get("Env") or []
        lim = self.limits
        kwargs: dict[str, Any] = dict(
            image=img.id,
            entrypoint=["/bin/sh", "-c", _KEEPER],
            command=[],
            detach=True,
            working_dir=self.root,
            environment=env,
            labels={"ssrkit.sandbox": "1", "ssrkit.pid": str(os.getpid()), "ssrkit.host": _HOST,
                    RUN_LABEL: _cleanup.run_id(), "ssrkit.image": image},
            name=f"ssrkit-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            mem_limit=f"{int(lim.memory_mb)}m",
            memswap_limit=f"{int(lim.memory_mb)}m",
            pids_limit=int(lim.pids),
            nano_cpus=int(float(lim.cpus) * 1e9) if lim.cpus else None,
            stdin_open=False,
            tty=False,
        )
        if not lim.network:
            kwargs["network_disabled"] = True
            kwargs["network_mode"] = "none"
        _cleanup.register(self)
        try:
            self.container = self.client.containers.create(**kwargs)
            self.container.start()
            res = self._exec_simple(
                f"mkdir -p {STATE}/scratch {STATE}/snaps {STATE}/io {STATE}/home && test -d {shlex.quote(self.root)}"
                f" || {{ echo 'ssrkit: no directory {self.root} in the image (wrong --workdir?)'; exit 3; }}; "
                "command -v bash >/dev/null || { echo 'ssrkit: the image has no bash'; exit 3; }; "
                "python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null && echo ssrkit:py",
                timeout=timeouts.FEW_FILES)
            if res[0] != 0:
                raise SandboxError(f"Docker image {image!r}: {res[1].strip()[:300]}")
            # incremental snapshots/resets need python3 >= 3.9 in the image; otherwise plain `cp -a`
            self._tree_helper = "ssrkit:py" in res[1]
            if self._tree_helper:
                self._put_file(_HELPER, Path(_tree_mod.__file__).read_bytes(), 0o644)
        except docker.errors.APIError as e:
            self.close()
            raise SandboxError(f"could not start a container from {image!r}: {e.explanation or e}") from None
        except BaseException:
            self.close()
            raise

    # -- low-level exec ------------------------------------------------------------------------------------
    def _exec_simple(self, script: str, timeout: float = timeouts.WHOLE_TREE) -> tuple[int, str]:
        """Run a short internal script (no wrapper, no limits); (exit code, output)."""
        api = self.client.api
        ex = api.exec_create(self.container.id, ["/bin/sh", "-c", script], stdout=True, stderr=True)
        out = api.exec_start(ex["Id"], stream=False, demux=False)
        code = api.exec_inspect(ex["Id"]).get("ExitCode")
        return (code if code is not None else -1), (out or b"").decode("utf-8", "replace")

    def _limits_lines(self) -> str:
        lim = self.limits
        s = f"ulimit -f {int(lim.file_size_mb) * 1024} 2>/dev/null; "
        if lim.cpu_seconds:
            s += f"ulimit -t {int(lim.cpu_seconds)} 2>/dev/null; "
        return s

    def run(self, command: str, *, timeout: float, env: Mapping[str, str] | None = None,
            stdin: bytes | str | None = None, cwd: str | None = None) -> ExecResult:
        with self._lock:
            self._check_open()
            res = self._run(command, timeout=timeout, env=env, stdin=stdin, cwd=cwd)
        _cleanup.check_running()  # stopped while it ran (its sandbox closed under it): no result
        return res

    def _run(self, command, *, timeout, env, stdin, cwd) -> ExecResult:
        self._clean = None
        self._ran = True
        api = self.client.api
        start = time.monotonic()
        in_cwd = self.root if cwd is None else posixpath.normpath(posixpath.join(self.root, cwd))
        stdin_path = ""
        if stdin is not None:
            self._n += 1
            stdin_path = f"{STATE}/io/stdin-{self._n}"
            self._put_file(stdin_path, stdin.encode("utf-8") if isinstance(stdin, str) else stdin, 0o600)
        environment = {k: v for k, v in (env or {}).items() if not is_secret_name(k)}
        wrapper = _WRAPPER.replace("{limits}", self._limits_lines()).replace("{{", "{").replace("}}", "}")
        argv = ["bash", "-c", wrapper, "ssrkit-sandbox", in_cwd, command, stdin_path]
        cap = OutputCapture(self.limits.output_bytes)
        ctl = bytearray()
        timed_out = False
        try:
            ex = api.exec_create(self.container.id, argv, stdout=True, stderr=True, stdin=False, tty=False,
                                 environment=environment or None)
        except Exception as e:  # noqa: BLE001
            raise SandboxError(f"could not start a command in the container: {e}") from None
        exec_id = ex["Id"]
        sock = api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        try:
            timed_out = self._pump(raw, start + max(float(timeout), 0.0), cap, ctl)
            if timed_out:
                self._kill_all()
                self._pump(raw, time.monotonic() + 5, cap, ctl)
        finally:
            try:
                sock.close()
            except Exception:  # noqa: BLE001
                pass
            if timed_out or self._closed:
                pass
        code = None
        m = re.search(rb"ssrkit:rc=(\d+)", bytes(ctl))
        if m and not timed_out:
            code = int(m.group(1))
        else:
            for _ in range(250):
                info = api.exec_inspect(exec_id)
                if not info.get("Running"):
                    code = info.get("ExitCode")
                    break
                time.sleep(0.02)
        data, truncated = cap.result()
        rc = TIMEOUT_EXIT_CODE if timed_out else (code if code is not None else -1)
        return ExecResult(exit_code=rc, output=decode_output(data), seconds=time.monotonic() - start,
                          timed_out=timed_out, truncated=truncated)

    @staticmethod
    def _pump(raw, deadline: float, cap: OutputCapture, ctl: bytearray) -> bool:
        """Demultiplex the exec stream into `cap` until EOF; True when the deadline came first."""
        buf = bytearray()
        raw.setblocking(False)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            try:
                ready, _, _ = select.select([raw], [], [], min(remaining, 1.0))
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                chunk = raw.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return False
            if not chunk:
                return False
            buf += chunk
            while len(buf) >= 8:
                size = struct.unpack(">I", bytes(buf[4:8]))[0]
                if len(buf) < 8 + size:
                    break
                if buf[0] == 2:
                    ctl += buf[8:8 + size]
                else:
                    cap.feed(bytes(buf[8:8 + size]))
                del buf[:8 + size]

    def _kill_all(self) -> None:
        """Kill every process but pid 1; restart the container when not even that can run."""
        try:
            api = self.client.api
            ex = api.exec_create(self.container.id, ["bash", "-c", _KILL_ALL], stdout=True, stderr=True)
            out = (api.exec_start(ex["Id"], stream=False) or b"").decode("utf-8", "replace")
            if out.strip().endswith("clean"):
                return
            log.debug("in-container kill left processes: %s", out.strip()[-200:])
        except Exception as e:  # noqa: BLE001
            log.debug("in-container kill failed: %s", e)
        try:
            self.container.restart(timeout=0)
        except Exception as e:  # noqa: BLE001
            raise SandboxError(f"could not stop a timed-out command in container {self.container.name}: {e}") \
                from None

    # -- files -------------------------------------------------------------------------------------------
    def _path(self, path: str) -> str:
        if posixpath.isabs(path):
            p = posixpath.normpath(path)
            if p == self.scratch or p.startswith(self.scratch + "/") or p == self.root or \
                    p.startswith(self.root + "/"):
                return p
            raise SandboxError(f"{path} is neither under the repository root nor under the scratch dir")
        rel = posixpath.normpath(path)
        if rel == ".." or rel.startswith("../"):
            raise SandboxError(f"{path} escapes the repository")
        return posixpath.join(self.root, rel)

    def _put_file(self, path: str, data: bytes, mode: int) -> None:
        docker = _docker_module()
        parent, name = posixpath.split(path)
        bio = io.BytesIO()
        with tarfile.open(fileobj=bio, mode="w") as tar:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = mode
            ti.mtime = int(time.time())
            tar.addfile(ti, io.BytesIO(data))
        payload = bio.getvalue()
        try:
            ok = self.container.put_archive(parent, payload)
        except docker.errors.NotFound:
            code, out = self._exec_simple(f"mkdir -p {shlex.quote(parent)}")
            if code != 0:
                raise SandboxError(f"cannot create {parent} in the container: {out.strip()[:200]}") from None
            ok = self.container.put_archive(parent, payload)
        if not ok:
            raise SandboxError(f"could not write {path} in the container")

    def _existing_mode(self, path: str) -> int | None:
        """Permission bits of `path` in the container (HEAD on the archive endpoint), None if absent."""
        api = self.client.api
        try:
            res = api.head(api._url("/containers/{0}/archive", self.container.id), params={"path": path})
        except Exception:  # noqa: BLE001
            return None
        hdr = res.headers.get("X-Docker-Container-Path-Stat") if res.status_code == 200 else None
        if not hdr:
            return None
        try:
            st = json.loads(base64.b64decode(hdr))
        except ValueError:
            return None
        if st.get("mode", 0) & (1 << 31):  # a directory
            raise IsADirectoryError(path)
        return int(st.get("mode", 0o644)) & 0o777

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        """Write a file; an existing file keeps its permissions unless `mode` is given (default 0644)."""
        with self._lock:
            self._check_open()
            p = self._path(path)
            if isinstance(data, str):
                data = data.encode("utf-8")
            if mode is None:
                mode = self._existing_mode(p)
            self._clean = None
            self._put_file(p, data, 0o644 if mode is None else mode)

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        """The file's bytes (a symlink followed inside the container); `limit`: FileTooLargeError, before the
        archive is read, for a file over that many bytes (`read_small`)."""
        docker = _docker_module()
        with self._lock:
            self._check_open()
            p = self._path(path)
            try:
                stream, st = self.container.get_archive(p)
            except docker.errors.NotFound:
                raise FileNotFoundError(path) from None
            is_link = bool(int(st.get("mode", 0)) & (1 << 27))  # Go's os.ModeSymlink
            if limit is not None and not is_link and int(st.get("size", 0)) > limit:
                getattr(stream, "close", lambda: None)()
                raise FileTooLargeError(path, int(st.get("size", 0)), limit)
            data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = tar.getmembers()
            if not members:
                raise FileNotFoundError(path)
            m = members[0]
            if m.isdir():
                raise IsADirectoryError(path)
            if m.issym() or m.islnk():
                # follow the link inside the container
                target = posixpath.normpath(posixpath.join(posixpath.dirname(p), m.linkname))
                return self.read_file(target, limit)
            f = tar.extractfile(m)
            return f.read() if f else b""

    def read_small(self, path: str, limit: int) -> bytes:
        return self.read_file(path, limit)

    # -- snapshots ---------------------------------------------------------------------------------------
    def _helper(self, op: str, name: str) -> None:
        code, out = self._exec_simple(
            f"python3 {_HELPER} {op} {shlex.quote(self.root)} {STATE} {shlex.quote(name)}", timeout=timeouts.TREE_COPY)
        if code != 0:
            raise SandboxError(f"could not {op} the container's repository: {out.strip()[-300:]}")

    def snapshot(self, name: str) -> None:
        with self._lock:
            self._check_open()
            if self._clean == name:
                return
            self._clean = None
            if self._tree_helper:
                self._helper("snapshot", name)
                self._snaps.add(name)
                self._clean = name
                return
            d = _snap_dir(name)
            q, r = shlex.quote(d), shlex.quote(self.root)
            code, out = self._exec_simple(f"rm -rf {q}.tmp && cp -a {r} {q}.tmp && rm -rf {q} && mv {q}.tmp {q}",
                                          timeout=timeouts.TREE_COPY)
            if code != 0:
                raise SandboxError(f"could not snapshot the container's repository: {out.strip()[:300]}")
            self._snaps.add(name)
            self._clean = name

    def reset(self, name: str = PRISTINE) -> None:
        with self._lock:
            self._check_open()
            if name not in self._snaps:
                known = ", ".join(sorted(self._snaps)) or "none"
                raise SandboxError(f"no snapshot named {name!r} in this sandbox (known: {known})")
            if self._ran:  # every reset starts a run with an empty HOME and /tmp
                self._exec_simple(f"rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* {STATE}/home 2>/dev/null; "
                                  f"mkdir -p {STATE}/home", timeout=timeouts.WHOLE_TREE)
                self._ran = False
            if self._clean == name:
                return
            self._clean = None
            if self._tree_helper:
                self._helper("reset", name)
                self._clean = name
                return
            q, r = shlex.quote(_snap_dir(name)), shlex.quote(self.root)
            code, out = self._exec_simple(
                f"find {r} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + && cp -a {q}/. {r}/", timeout=timeouts.TREE_COPY)
            if code != 0:
                raise SandboxError(f"could not reset the container's repository: {out.strip()[:300]}")
            self._clean = name

    # -- lifetime ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        _cleanup.check_running()  # the process is stopping: Interrupted, whether this sandbox is closed yet or not
        if self._closed:
            raise SandboxError("this sandbox is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cont = self.container
        if cont is not None:
            for attempt in range(3):
                try:
                    cont.remove(force=True, v=True)
                    break
                except Exception as e:  # noqa: BLE001
                    if "No such container" in str(e) or "is already in progress" in str(e):
                        break
                    time.sleep(0.2 * (attempt + 1))
        _cleanup.unregister(self)

    @property
    def isolation(self) -> dict[str, object]:
        lim = self.limits
        return {
            "backend": "docker",
            "mechanism": "container",
            "filesystem": "the image only (no host path mounted); private HOME, /tmp emptied by every reset",
            "network": "host" if lim.network else "none",
            "processes": "container pid namespace; leftovers killed after every command",
            "memory": f"container cgroup: {lim.memory_mb} MiB for the whole process tree",
            "pids": f"container cgroup: {lim.pids}",
            "not_isolated": ["network (enabled by Limits.network)"] if lim.network else [],
        }

    def __repr__(self) -> str:
        name = getattr(self.container, "name", "?")
        return f"<DockerSandbox {self.image} container={name}>"
