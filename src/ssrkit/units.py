"""What every unit of work does on whichever machine runs it: a scratch copy of a packed artifact, and the
scratch paths in its results replaced by the driver's (see `executor/`).

The units themselves live beside the engines that submit them (`validate.validate_unit`,
`solve.attempt_unit`, `higher_order.combine_unit`, `inject.llm.llm_injection_unit`,
`inject.evaluate.candidate_unit`), so no engine and its units import each other in a ring. Each takes its
inputs as `ArtifactRef`/`SourceRef` and returns data. Given references to this machine's
paths (the local executor) a unit works on the artifact in place, exactly as before the seam existed; given
packed ones (Ray) it works on a scratch copy on its node and returns what it made — with the scratch paths
replaced by the driver's — for the driver to write. Nothing here writes into a driver's directory.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from .executor import ArtifactRef, Scratch, SourceRef
from .store.source import RepoSource


def scratch_for(ref: ArtifactRef):
    """A scratch directory for a packed artifact; none for one that is used in place."""
    return Scratch() if ref.files is not None else nullcontext(None)


def path_mapping(path: Path, ref: ArtifactRef, source: RepoSource, sref: SourceRef) -> dict[str, str]:
    """This machine's paths of the artifact and the repository -> the driver's."""
    out = {str(path): ref.origin}
    if source.kind == "local" and sref.source.kind == "local":
        out[str(source.path)] = str(sref.source.path)
    return out


def relabel_bytes(files: dict[str, bytes], mapping: dict[str, str]) -> dict[str, bytes]:
    """Files with this machine's paths replaced by the driver's (`path_mapping`)."""
    pairs = [(k.encode(), v.encode()) for k, v in mapping.items() if k and k != v]
    out = {}
    for rel, data in files.items():
        for old, new in pairs:
            data = data.replace(old, new)
        out[rel] = data
    return out
