"""Which policy version answers a request, read from the server's `GET /v1/models` cards.

`ssrkit serve` lists a versioned checkpoint under its alias too (`store.policy`): a second name with the same
`root` (restart strategy), or a LoRA adapter named by it whose `parent` is the base name (lora strategy). A server
that lists no alias serves an unknown version (started elsewhere, or the nccl strategy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store.policy import parse_alias


@dataclass(frozen=True)
class Resolved:
    name: str  # the model name to send
    version: dict[str, Any] | None  # {"step", "id"}; None: unknown
    aliases: bool  # the server lists some alias (an ssrkit server: worth probing every turn)


def resolve(cards: list[dict[str, Any]], model: str, follow: bool) -> Resolved:
    """The name to send and the version it will sample with. With `follow`, a request for the base name goes to
    the newest version the server offers under it (hot-swapped adapters); without, the name is sent as given."""
    aliased = [(c, parse_alias(str(c.get("id", "")))) for c in cards]
    aliased = [(c, v) for c, v in aliased if v is not None]
    own = parse_alias(model)
    if own is not None:
        return Resolved(model, own, True)
    base = next((c for c in cards if c.get("id") == model), None)
    sibling = next((v for c, v in aliased if base is not None and not c.get("parent")
                    and c.get("root") == base.get("root")), None)
    if follow:
        offered = [(v["step"], str(c["id"]), v) for c, v in aliased if c.get("parent") == model]
        if offered and (sibling is None or max(offered)[0] > sibling["step"]):
            step, name, version = max(offered)
            return Resolved(name, version, True)
    return Resolved(model, sibling, bool(aliased))
