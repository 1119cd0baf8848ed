"""Docker images for the docker sandbox backend: a base image built without a registry, and one image per
repository snapshot (SPEC §3).

Base image (`build_base_image`): there may be no registry to pull from, so `ssrkit/base:bookworm` is made
locally with `debootstrap --variant=minbase` from the Debian mirror apt already uses (packages: python3
3.11, pytest, coverage, pip, setuptools, wheel, git, procps), trimmed of apt caches and docs, and imported
with `docker import`. Downloaded packages are kept in a cache directory, so a rebuild does not download
again. Needs root and `debootstrap`. Any existing image can be used instead (`--base IMAGE`).

Repository image (`build_image`): the repository directory exactly as it is on disk (uncommitted, untracked
and git-ignored files, and `.git`, which the solver and history strategies need; a `.dockerignore` in the
repository is *not* honoured) is copied to /testbed on top of the base, and installed with
`pip install --no-build-isolation --no-deps -e .` when it has a pyproject.toml or setup.py. There is no
network during the build, so the install cannot fetch build backends or dependencies: it is best effort
(a failure is reported in the build log and the image is still produced), and dependencies must already be
in the base image or vendored. The image also holds the repository's `pristine` snapshot (made at build
time by `sandbox/_tree.py`), so a sandbox's first snapshot costs a walk instead of a copy of the tree.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..errors import SandboxError, SsrkitError
from ..store.source import DEFAULT_WORKDIR

BASE_IMAGE = "ssrkit/base:bookworm"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pytest", "python3-coverage", "python3-pip", "python3-setuptools",
                 "python3-wheel", "git", "procps", "ca-certificates")
DEFAULT_CACHE = "/var/cache/ssrkit/debootstrap"

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def _client():
    from .docker import client

    return client(timeout=600)


def image_exists(name: str, c=None) -> bool:
    import docker

    c = c or _client()
    try:
        c.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def apt_mirror(suite: str = BASE_SUITE) -> str:
    """The Debian mirror apt is configured with (deb822 or one-line format), else deb.debian.org."""
    cands: list[Path] = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        cands += sorted(d.glob("*.sources")) + sorted(d.glob("*.list"))
    for p in cands:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        if p.suffix == ".sources":
            for block in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", block, re.M))
                suites = fields.get("Suites", "").split()
                if "deb" in fields.get("Types", "").split() and suite in suites and \
                        "security" not in fields.get("URIs", ""):
                    return fields.get("URIs", "").split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and m.group(2) == suite and "security" not in m.group(1):
                    return m.group(1)
    return "http://deb.debian.org/debian"


def build_base_image(tag: str = BASE_IMAGE, *, suite: str = BASE_SUITE, mirror: str | None = None,
                     packages: tuple[str, ...] = BASE_PACKAGES, cache_dir: str = DEFAULT_CACHE,
                     force: bool = False, log: Log = _quiet) -> str:
    """Create the base image with debootstrap (cached: returns at once when `tag` exists, unless `force`)."""
    c = _client()
    if not force and image_exists(tag, c):
        log(f"{tag} already exists (use --force to rebuild)")
        return tag
    if shutil.which("debootstrap") is None:
        raise SsrkitError("debootstrap is not installed: apt-get install -y debootstrap "
                          "(or pass --base IMAGE to use an existing image)")
    if os.geteuid() != 0:
        raise SsrkitError("building the base image with debootstrap needs root (or pass --base IMAGE)")
    mirror = mirror or apt_mirror(suite)
    os.makedirs(cache_dir, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ssrkit-base-", dir=_scratch_dir(2 << 30)) as tmp, \
            tempfile.TemporaryDirectory(prefix="ssrkit-base-tar-", dir="/var/tmp") as tar_dir:
        rootfs = os.path.join(tmp, "rootfs")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
               f"--cache-dir={cache_dir}", suite, rootfs, mirror]
        log(f"$ {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise SsrkitError(f"debootstrap failed (mirror {mirror}): {tail}")
        log(f"debootstrap done in {time.monotonic() - started:.0f}s")
        _trim_rootfs(rootfs)
        tar_path = os.path.join(tar_dir, "rootfs.tar")
        subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", tar_path, "."], check=True)
        repo, _, tg = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        changes = ['ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                   'ENV LANG=C.UTF-8', 'CMD ["bash"]',
                   f'LABEL ssrkit.base="{suite}" ssrkit.packages="{",".join(packages)}"']
        c.api.import_image(src=tar_path, repository=repo, tag=tg, changes=changes)
    log(f"built {tag} in {time.monotonic() - started:.0f}s")
    return tag


def _scratch_dir(need: int) -> str:
    """/dev/shm when it has `need` bytes free: dpkg fsyncs every file it unpacks, which is free on tmpfs
    (debootstrap takes about half the time there), else /var/tmp."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= need and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()


def _trim_rootfs(rootfs: str) -> None:
    for rel in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                "usr/share/info", "var/log"):
        p = os.path.join(rootfs, rel)
        if os.path.isdir(p):
            for name in os.listdir(p):
                if name in ("partial", "lock"):
                    continue
                q = os.path.join(p, name)
                if os.path.isdir(q) and not os.path.islink(q):
                    shutil.rmtree(q, ignore_errors=True)
                else:
                    try:
                        os.unlink(q)
                    except OSError:
                        pass
    # repositories in images are owned by whoever built them; git must not refuse them
    with open(os.path.join(rootfs, "etc", "gitconfig"), "a") as fh:
        fh.write("[safe]\n\tdirectory = *\n")


#: The Dockerfile step that installs the repository at {workdir} (best effort, no network): shared by the
#: sandbox images and the exported task images (`ssrkit export --format swebench-task | harbor`).
INSTALL_STEP = """\
RUN set -e; cd {workdir}; \\
    if [ -f pyproject.toml ] || [ -f setup.py ]; then \\
      if command -v pip >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1; then \\
        python3 -m pip install --no-build-isolation --no-deps --no-input --break-system-packages -e . \\
          || python3 -m pip install --no-build-isolation --no-deps --no-input -e . \\
          || echo "ssrkit: editable install failed (best effort; see above)"; \\
      else echo "ssrkit: no pip in the base image; the repository is not installed"; fi; \\
    fi; \\
    git config --system --add safe.directory '*' 2>/dev/null || true
"""

_DOCKERFILE = """\
FROM {base}
COPY repo/ {workdir}/
WORKDIR {workdir}
""" + INSTALL_STEP + """\
COPY ssrkit/ssrkit_tree.py /.ssrkit/ssrkit_tree.py
RUN if python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then \
      python3 /.ssrkit/ssrkit_tree.py snapshot {workdir} /.ssrkit pristine; fi
LABEL ssrkit.repo={label} ssrkit.workdir={workdir}
"""


def default_tag(repo_path: str) -> str:
    from ._repo import local_fingerprint

    name = re.sub(r"[^a-z0-9_.-]+", "-", Path(repo_path).name.lower()).strip("-.") or "repo"
    return f"ssrkit/{name}:{local_fingerprint(repo_path)[:12]}"


def _context_tar(repo_path: str, dockerfile: str, out) -> None:
    """The build context: the repository exactly as on disk under `repo/`, plus the Dockerfile."""
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = dockerfile.encode()
        ti = tarfile.TarInfo("Dockerfile")
        ti.size = len(data)
        ti.mtime = int(time.time())
        tar.addfile(ti, io.BytesIO(data))
        tar.add(repo_path, arcname="repo", recursive=True)
        from . import _tree

        tar.add(_tree.__file__, arcname="ssrkit/ssrkit_tree.py")


def build_image(repo_path: str | os.PathLike, tag: str | None = None, base: str = BASE_IMAGE, *,
                workdir: str = DEFAULT_WORKDIR, build_base: bool = True, log: Log = _quiet) -> str:
    """Build an image holding `repo_path` (as it is on disk, .git included) at `workdir`; return its tag.

    When `base` is the default ssrkit base image and it does not exist yet, it is built first (debootstrap)
    unless `build_base` is False.
    """
    import docker

    repo = os.path.realpath(os.fspath(repo_path))
    if not os.path.isdir(repo):
        raise SsrkitError(f"repository {repo_path} does not exist or is not a directory")
    c = _client()
    if not image_exists(base, c):
        if base == BASE_IMAGE and build_base:
            log(f"base image {base} is missing; building it with debootstrap (cached afterwards)")
            build_base_image(base, log=log)
        else:
            raise SsrkitError(f"base image {base!r} not found: build it with `ssrkit image base` or pass an "
                              f"existing image with --base")
    tag = tag or default_tag(repo)
    dockerfile = _DOCKERFILE.format(base=base, workdir=workdir, label=json.dumps(repo))
    started = time.monotonic()
    with tempfile.TemporaryFile(dir="/var/tmp" if os.path.isdir("/var/tmp") else None) as ctx:
        try:
            _context_tar(repo, dockerfile, ctx)
        except OSError as e:
            raise SsrkitError(f"cannot read {repo} for the image: {e}") from None
        ctx.seek(0)
        lines: list[str] = []
        try:
            for chunk in c.api.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True,
                                     decode=True, network_mode="none", pull=False):
                if "stream" in chunk:
                    for line in chunk["stream"].splitlines():
                        if line.strip():
                            lines.append(line)
                            log(line)
                if "error" in chunk:
                    tail = "\n".join(lines[-10:])
                    raise SsrkitError(f"docker build of {repo} failed: {chunk['error'].strip()}\n{tail}")
        except docker.errors.APIError as e:
            raise SandboxError(f"docker build of {repo} failed: {e.explanation or e}") from None
    log(f"built {tag} from {repo} in {time.monotonic() - started:.1f}s")
    return tag

