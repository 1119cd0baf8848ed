"""Several model servers behind one client: spread, sticky trajectories, failover (`--base-url` repeated).

`EndpointPool` looks like a `ModelClient` to the agent loop (`complete`, `describe`, `model`, `sampling`).
A trajectory's first turn goes to the server with the fewest requests in flight; its later turns go to the
same server (its prefix cache holds the conversation) — a trajectory is recognised by the thread running
it and its opening messages. A server that fails a turn (unreachable, or 5xx/429 after the client's own
bounded retries) is set aside for `cooldown_s` and the turn is asked of another one; only when every server
has failed does the error reach the caller. Each completion says which server answered (`server`), and the
trajectory records it per turn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import SsrkitError
from ..store.config import load_settings
from .client import (AgentSampling, Completion, ModelClient, ModelError, ModelSettings, Sampling,
                     ServerDownError)

if TYPE_CHECKING:
    from ..store.config import Config

log = logging.getLogger("ssrkit.agents")

#: how long a failed server is skipped before it is tried again
COOLDOWN_S = 30.0
_STICKY_MAX = 4096


def base_urls(values: Iterable[str] | str | None) -> list[str]:
    """The endpoints of `--base-url` values: each a URL, several separated by commas, or a file of URLs
    (one a line, `#` comments)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        v = str(v).strip()
        if not v:
            continue
        if "://" not in v and Path(v).expanduser().is_file():
            lines = Path(v).expanduser().read_text(encoding="utf-8").splitlines()
            found = [ln.split("#", 1)[0].strip() for ln in lines]
            found = [u for u in found if u]
            if not found:
                raise SsrkitError(f"--base-url {v}: the file lists no URL (one http(s) URL a line)")
            out.extend(found)
        else:
            out.extend(u.strip() for u in v.split(",") if u.strip())
    return list(dict.fromkeys(out))


def connect(urls: Iterable[str] | str, model: str, **kw: Any) -> "ModelClient | EndpointPool":
    """One ModelClient for one URL; an EndpointPool over several (same model and settings on each)."""
    found = base_urls(urls)
    if not found:
        raise ModelError("no base URL given: pass --base-url URL (several times for several servers)")
    clients = [ModelClient(u, model, **kw) for u in found]
    return clients[0] if len(clients) == 1 else EndpointPool(clients)


def client_from_config(cfg: "Config", section: str, *, base_url: Iterable[str] | str | None = None,
                       model: str | None = None, api_key_env: str | None = None, temperature: float | None = None,
                       max_tokens: int | None = None, token_ids: bool = True) -> "ModelClient | EndpointPool":
    """The model client of an LLM agent: flags first, then `[section]` (base_url, model, api_key_env), then
    `[agent]`'s sampling keys (temperature, top_p, max_tokens); defaults are `ModelClient`'s and `Sampling`'s.
    Several base URLs give an EndpointPool."""
    m = load_settings(ModelSettings, cfg, section=section, model=model or None, api_key_env=api_key_env or None)
    urls = base_urls(base_url or m.base_url)
    if not urls or not m.model:
        raise SsrkitError(f"the llm agent needs --base-url and --model (or base_url/model in [{section}]), e.g. "
                          "--base-url http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct")
    a = load_settings(AgentSampling, cfg, temperature=temperature, max_tokens=max_tokens)
    sampling = Sampling(temperature=a.temperature, top_p=a.top_p, max_tokens=a.max_tokens)
    return connect(urls, m.model, sampling=sampling, want_token_ids=token_ids, follow_policy=a.follow_policy,
                   server_wait_s=float(a.server_wait), api_key_env=m.api_key_env)


class EndpointPool:
    def __init__(self, clients: list[ModelClient], *, cooldown_s: float = COOLDOWN_S):
        if not clients:
            raise ModelError("an endpoint pool needs at least one server")
        self.clients = clients
        self.cooldown_s = cooldown_s
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self.outstanding = [0] * len(self.clients)
        self.answered = [0] * len(self.clients)
        self._down_until = [0.0] * len(self.clients)
        self._sticky: OrderedDict[tuple[int, str], int] = OrderedDict()

    # travels to other machines (--executor ray) as its clients; the counters start afresh there
    def __getstate__(self) -> dict[str, Any]:
        return {"clients": self.clients, "cooldown_s": self.cooldown_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.clients = state["clients"]
        self.cooldown_s = state["cooldown_s"]
        self._init_state()

    # what the agent loop and the recorders read -------------------------------------------------
    @property
    def model(self) -> str:
        return self.clients[0].model

    @property
    def sampling(self):
        return self.clients[0].sampling

    @property
    def want_token_ids(self) -> bool:
        return self.clients[0].want_token_ids

    @property
    def public_url(self) -> str:
        return ",".join(c.public_url for c in self.clients)

    def __repr__(self) -> str:
        return f"EndpointPool({[c.public_url for c in self.clients]!r}, model={self.model!r})"

    def describe(self) -> dict[str, Any]:
        return {**self.clients[0].describe(), "base_url": self.clients[0].public_url,
                "base_urls": [c.public_url for c in self.clients]}

    def list_models(self) -> list[str] | None:
        for c in self.clients:
            found = c.list_models()
            if found is not None:
                return found
        return None

    # the one call ---------------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, str]]) -> Completion:
        key = (threading.get_ident(), _opening(messages))
        failed: set[int] = set()
        last: Exception | None = None
        while True:
            i = self._pick(key, failed)
            if i is None:
                assert last is not None
                raise ModelError(f"every model server failed this turn ({len(self.clients)} tried); "
                                 f"the last said: {last}")
            try:
                completion = self.clients[i].complete(messages)
            except ServerDownError as e:
                last = e
                failed.add(i)
                with self._lock:
                    self.outstanding[i] -= 1
                    self._down_until[i] = time.monotonic() + self.cooldown_s
                    self._sticky.pop(key, None)
                log.warning("%s failed a turn (%s); asking another server", self.clients[i].public_url, e)
                continue
            except BaseException:
                with self._lock:
                    self.outstanding[i] -= 1
                raise
            with self._lock:
                self.outstanding[i] -= 1
                self.answered[i] += 1
            completion.server = self.clients[i].public_url
            return completion

    def _pick(self, key: tuple[int, str], failed: set[int]) -> int | None:
        """The trajectory's server if it is up, else the live one with the fewest requests in flight."""
        now = time.monotonic()
        with self._lock:
            i = self._sticky.get(key)
            if i is None or i in failed or self._down_until[i] > now:
                live = [j for j in range(len(self.clients)) if j not in failed and self._down_until[j] <= now]
                if not live:  # every server is cooling down: try those not failed on this turn
                    live = [j for j in range(len(self.clients)) if j not in failed]
                if not live:
                    return None
                i = min(live, key=lambda j: (self.outstanding[j], self.answered[j], j))
                self._sticky[key] = i
                while len(self._sticky) > _STICKY_MAX:
                    self._sticky.popitem(last=False)
            self._sticky.move_to_end(key)
            self.outstanding[i] += 1
            return i


def _opening(messages: list[dict[str, str]]) -> str:
    """A trajectory's opening (system prompt and task), as a key."""
    head = json.dumps(messages[:2], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(head.encode("utf-8")).hexdigest()[:24]
