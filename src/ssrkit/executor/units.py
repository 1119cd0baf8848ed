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

import json
import tomllib
from contextlib import nullcontext
from pathlib import Path

import tomli_w

from .base import ArtifactRef, Scratch, SourceRef, relabel
from ..store.artifact import EVAL, METADATA, VALIDATION
from ..store.fsutil import json_text
from ..store.source import RepoSource


def scratch_for(ref: ArtifactRef):
    """A scratch directory for a packed artifact; none for one that is used in place."""
    return Scratch() if ref.files is not None else nullcontext(None)


def path_mapping(path: Path, ref: ArtifactRef, source: RepoSource, sref: SourceRef) -> dict[str, str]:
    """This machine's paths of the artifact and the repository -> the driver's."""
    out = {str(path): ref.origin}
    if source.kind == "local" and sref.source.kind == "local":
        out[str(source.path)] = str(sref.source.path)
    return out


#: the files of a unit's result that may name this machine's paths: ssrkit's own records (verdicts,
#: metadata), by their path in the result. Nothing else is touched: model output (trajectory.json, whose
#: messages must stay the text its token ids encode; fix.diff; the artifact's five files) and the raw logs
#: of what ran are the driver's byte for byte.
RECORDS = (VALIDATION, EVAL, METADATA)


def relabel_bytes(files: dict[str, bytes], mapping: dict[str, str]) -> dict[str, bytes]:
    """Files with this machine's paths replaced by the driver's (`path_mapping`) in the `RECORDS` alone,
    string by string (`executor.relabel`), written again as ssrkit writes them."""
    if not any(k and k != v for k, v in mapping.items()):
        return files
    out = dict(files)
    for rel in RECORDS:
        if rel in files:
            out[rel] = _relabel_record(rel, files[rel], mapping)
    return out


def _relabel_record(rel: str, data: bytes, mapping: dict[str, str]) -> bytes:
    try:
        if rel.endswith(".toml"):
            return tomli_w.dumps(relabel(tomllib.loads(data.decode("utf-8")), mapping)).encode("utf-8")
        return json_text(relabel(json.loads(data), mapping)).encode("utf-8")
    except (ValueError, UnicodeDecodeError, TypeError):  # not what ssrkit writes there: left as it is
        return data
