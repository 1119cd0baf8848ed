"""One chat call to any OpenAI-compatible endpoint (vLLM, a hosted API), with bounded retries.

Why a wrapper around `openai`: the agent loop needs (1) the exact token ids and log-probs of each turn when the
server can return them (vLLM does; training prefers them to re-tokenizing), (2) retries that are bounded and
logged, and (3) errors a person can act on — a misspelled model, a `/v1/v1` base URL or a stopped server should
say what to change, not print a traceback. The API key lives only inside this object: it is never logged,
recorded in a trajectory, or handed to a sandbox.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import SsrkitError
from ..store.config import setting
from .policy import Resolved, resolve


class _Openai:
    """The `openai` package, imported when first used: it takes ~0.5 s to import, and every ssrkit command
    that never calls a model (`inject`, `validate`, ...) would pay it at start through the CLI's imports."""

    def __getattr__(self, name: str) -> Any:
        import openai as module

        globals()["openai"] = module
        return getattr(module, name)


openai: Any = _Openai()

log = logging.getLogger("ssrkit.agents")

#: used when no key is configured: local servers (vLLM without --api-key) accept anything
_NO_KEY = "EMPTY"


class ModelError(SsrkitError):
    """The endpoint is misconfigured or unreachable: every later call would fail the same way."""


class ServerDownError(ModelError):
    """This server is unreachable or kept failing (5xx, 429, timeouts): another server may answer."""


class ContextLengthError(SsrkitError):
    """The conversation no longer fits in the model's context window (the server said so)."""


@dataclass
class Sampling:
    """Sampling parameters sent with every request; recorded in each trajectory."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int | None = None
    stop: list[str] | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


#: where a client reads its API key unless told otherwise
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


@dataclass
class AgentSampling:
    """`[agent]` keys of the model client: sampling parameters (defaults: `Sampling`'s), whether to follow the
    newest policy the server offers (`agents.policy`), and how long a turn waits for a server that is down
    (restarting for a refresh) before the run ends with `error`."""

    SECTION: ClassVar[str] = "agent"

    temperature: float = setting(Sampling.temperature, help="sampling temperature")
    top_p: float = setting(Sampling.top_p, help="nucleus sampling")
    max_tokens: int = setting(Sampling.max_tokens, help="tokens per reply")
    follow_policy: bool = setting(False, help="follow the newest policy the server offers (continuous training)")
    server_wait: float = setting(0.0, help="seconds a turn waits for a server that is down before the run ends")


@dataclass
class ModelSettings:
    """The endpoint of an LLM agent, in the section of its stage (`[inject]`, `[solve]`); the flags win."""

    base_url: list[str] = setting(factory=list, help="the OpenAI-compatible server(s), e.g. "
                                  "http://localhost:8000/v1 (several: a pool)")
    model: str = setting("", help="the model name the server serves")
    api_key_env: str = setting(DEFAULT_KEY_ENV, help="the environment variable holding the API key")


#: a server that never listed a policy alias is asked again at most this often (a hosted API is not polled per turn)
POLICY_REPROBE_S = 60.0

#: What a server's per-token log-probs mean. vLLM returns "raw" ones (before temperature, top-k/top-p) unless it
#: runs with `--logprobs-mode processed_logprobs` ("processed": after them). The trainer computes
#: log_softmax(logits / T), which equals "processed" at top_p = 1, and equals "raw" only at T = 1 as well.
LOGPROB_MODES = ("processed", "raw", "unknown")
#: the probe's conversation: short, fixed, and recognisably not a task (scripted test servers see it too)
PROBE_MESSAGES = [{"role": "user", "content": "ssrkit log-prob probe: say anything."}]


@dataclass
class Completion:
    """One assistant turn as the server returned it. Token data is None when the server did not send it."""

    text: str
    finish_reason: str | None
    usage: dict[str, Any]
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    seconds: float = 0.0
    server: str | None = None  # which server answered, when several serve the model (EndpointPool)
    policy: dict[str, Any] | None = None  # the policy version that sampled it ({"step", "id"}); None: unknown
    server_wait_s: float = 0.0  # seconds this turn waited for a server that was down


class ModelClient:
    """Chat completions against `base_url` (e.g. ``http://localhost:8000/v1``) for one `model`.

    `want_token_ids` asks the server for prompt/completion token ids and per-token log-probs (vLLM's
    `return_token_ids`, plus `return_tokens_as_token_ids` + `logprobs` for older versions). A server that
    ignores the request simply yields `None` fields; one that rejects the extra fields with a 400 is asked
    again without them, once, and never again.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = DEFAULT_KEY_ENV,
        sampling: Sampling | None = None,
        want_token_ids: bool = True,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        timeout_s: float = 600.0,
        follow_policy: bool = False,
        server_wait_s: float = 0.0,
    ):
        if not base_url or not urlsplit(base_url).scheme.startswith("http"):
            raise ModelError(f"base URL {base_url!r} is not an http(s) URL; e.g. http://localhost:8000/v1")
        if not model:
            raise ModelError("no model name given: pass the name the server serves (see its /v1/models)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.sampling = sampling or Sampling()
        self.want_token_ids = want_token_ids
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.follow_policy = follow_policy
        self.server_wait_s = server_wait_s
        self._policy: Resolved | None = None  # the last `resolve` of /v1/models, and when it was made
        self._policy_at = -math.inf
        self._policy_warned = False
        self._token_extras_ok = True
        self._semantics: dict[str, Any] | None = None
        self._probe_lock = threading.Lock()
        self._connect()

    def _connect(self) -> None:
        self._key_set = bool(os.environ.get(self.api_key_env))
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=os.environ.get(self.api_key_env) or _NO_KEY,
            max_retries=0,  # retries are ours: bounded, logged, and classified
            timeout=self.timeout_s,
        )

    # a client travels to other machines (--executor ray) without its key: each reads `api_key_env` there
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_client", "_key_set", "_probe_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._probe_lock = threading.Lock()
        self._connect()

    def __repr__(self) -> str:  # never shows the key
        return f"ModelClient(base_url={self.public_url!r}, model={self.model!r})"

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> "ModelClient":
        """Build from a config section: base_url, model, api_key_env, sampling fields, retry fields."""
        cfg = dict(cfg)
        sampling_keys = {"temperature", "top_p", "max_tokens", "seed", "stop", "extra_body"}
        client_keys = {"base_url", "model", "api_key_env", "want_token_ids", "max_retries", "backoff_s",
                       "max_backoff_s", "timeout_s", "follow_policy", "server_wait_s"}
        unknown = set(cfg) - sampling_keys - client_keys
        if unknown:
            raise SsrkitError(f"unknown model setting(s): {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(sampling_keys | client_keys))}")
        sampling = Sampling(**{k: cfg.pop(k) for k in list(cfg) if k in sampling_keys})
        return cls(cfg.pop("base_url", ""), cfg.pop("model", ""), sampling=sampling, **cfg)

    @property
    def public_url(self) -> str:
        """The base URL without user info or query string (which could carry credentials)."""
        parts = urlsplit(self.base_url)
        return urlunsplit((parts.scheme, parts.hostname + (f":{parts.port}" if parts.port else ""),
                           parts.path, "", ""))

    def describe(self) -> dict[str, Any]:
        """What a trajectory records about the model: no key, ever."""
        out = {"model": self.model, "base_url": self.public_url, "sampling": self.sampling.to_dict()}
        if self.want_token_ids:
            out["logprobs"] = self.logprob_semantics()
        return out

    def logprob_semantics(self) -> dict[str, Any]:
        """What this endpoint's log-probs mean at our sampling settings, found once per client.

        At temperature 1 and top_p 1 raw and processed log-probs are the same numbers, so nothing is asked. At
        any other temperature two one-token requests tell them apart: the most likely token's log-prob does not
        move with the temperature when the server returns raw log-probs, and does when they are processed. A
        server that returns raw log-probs at T != 1 gets one warning: the trainer will not compare them with its
        own (it recomputes the old policy instead).
        """
        with self._probe_lock:
            if self._semantics is None:
                s = self.sampling
                mode, how = "unknown", "not probed"
                if s.temperature == 1.0 and s.top_p == 1.0:
                    mode, how = "processed", "temperature 1 and top_p 1: raw and processed log-probs agree"
                elif s.temperature > 0:
                    mode, how = self._probe_mode()
                if mode == "raw":
                    log.warning(
                        "%s returns raw log-probs (before temperature) at temperature %g: training will recompute "
                        "the old policy instead of using them. Serve with `--logprobs-mode processed_logprobs` "
                        "(ssrkit serve does) to keep the sampler's", self.public_url, s.temperature)
                self._semantics = {"mode": mode, "temperature": s.temperature, "top_p": s.top_p,
                                   "dtype": None, "how": how}
            return dict(self._semantics)

    def _probe_mode(self) -> tuple[str, str]:
        def top(temperature: float) -> float | None:
            req = {"model": self.model, "messages": PROBE_MESSAGES, "temperature": temperature, "top_p": 1.0,
                   "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "seed": 0}
            try:
                data = json.loads(self._client.chat.completions.with_raw_response.create(**req).text)
                content = data["choices"][0]["logprobs"]["content"][0]
                values = [float(t["logprob"]) for t in content.get("top_logprobs") or []]
            except (openai.OpenAIError, ValueError, KeyError, IndexError, TypeError):
                return None
            return max(values) if values else None

        at_one, at_t = top(1.0), top(self.sampling.temperature)
        if at_one is None or at_t is None:
            return "unknown", "probe failed: the server returned no top log-probs"
        if abs(at_one - at_t) <= 1e-4:
            return "raw", f"probe: top log-prob {at_one:.4f} at T=1 and at T={self.sampling.temperature:g}"
        return "processed", f"probe: top log-prob {at_one:.4f} at T=1, {at_t:.4f} at T={self.sampling.temperature:g}"

    # -- the one call ----------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, str]]) -> Completion:
        """Send the conversation, return the assistant's reply. Raises ModelError, ContextLengthError."""
        attempt, waited, reresolved = 0, 0.0, False
        while True:
            policy = self.resolve_policy()
            started = time.monotonic()
            try:
                raw = self._client.chat.completions.with_raw_response.create(**self._request(messages, policy.name))
                data = json.loads(raw.text)
                done = _parse_completion(data, time.monotonic() - started)
                done.policy, done.server_wait_s = policy.version, round(waited, 3)
                return done
            except openai.APIStatusError as e:
                if e.status_code == 404 and self.follow_policy and policy.name != self.model and not reresolved:
                    reresolved, self._policy_at = True, -math.inf  # the adapter was unloaded since: ask again
                    continue
                if self._down(e.status_code) and attempt >= self.max_retries and waited < self.server_wait_s:
                    waited += self._wait_for_server(self.server_wait_s - waited)
                    attempt = 0
                    continue
                if e.status_code == 400 and self._token_extras_ok and self.want_token_ids and \
                        _mentions_token_params(e):
                    log.warning("%s rejected the token-id request fields; continuing without token ids",
                                self.public_url)
                    self._token_extras_ok = False
                    continue
                retryable = e.status_code == 429 or e.status_code >= 500 or e.status_code == 408
                if not retryable or attempt >= self.max_retries:
                    raise self._explain_status(e, attempt) from None
                delay = self._delay(attempt, e.response.headers.get("retry-after"))
                log.warning("%s answered HTTP %s; retry %d/%d in %.1fs", self.public_url, e.status_code,
                            attempt + 1, self.max_retries, delay)
            except openai.APIConnectionError as e:
                # a refused connection is usually a typo or a stopped server: say so within seconds
                limit = min(self.max_retries, 2) if _refused(e) else self.max_retries
                if attempt >= limit and waited < self.server_wait_s:
                    waited += self._wait_for_server(self.server_wait_s - waited)
                    attempt = 0
                    continue
                if attempt >= limit:
                    raise self._explain_connection(e, attempt) from None
                delay = self._delay(attempt, None)
                log.warning("%s: %s; retry %d/%d in %.1fs", self.public_url, _cause(e), attempt + 1,
                            self.max_retries, delay)
            except ValueError as e:  # the body was not JSON
                raise ModelError(f"{self.public_url}/chat/completions did not answer with JSON ({e}); "
                                 f"is it an OpenAI-compatible server?") from None
            attempt += 1
            time.sleep(delay)

    @staticmethod
    def _down(code: int) -> bool:
        return code == 429 or code >= 500 or code == 408

    def _wait_for_server(self, budget: float) -> float:
        """Poll the server's /health every second until it answers or `budget` seconds pass; the seconds spent.
        (A restart for a refresh takes the server away for a while: the run waits instead of failing.)"""
        started = time.monotonic()
        health = self.base_url.rsplit("/v1", 1)[0] + "/health"
        log.warning("%s is down; waiting up to %.0f s for it (refreshing?)", self.public_url, budget)
        while time.monotonic() - started < budget:
            try:
                with urllib.request.urlopen(health, timeout=5.0) as answer:  # noqa: S310 (the user's server)
                    if answer.status == 200:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(1.0)
        spent = time.monotonic() - started
        log.warning("waited %.0f s for %s", spent, self.public_url)
        return spent

    def model_cards(self) -> list[dict[str, Any]] | None:
        """`GET /models` as the server sent it (vLLM adds `root`, and `parent` for LoRA adapters); None: no answer."""
        try:
            raw = self._client.with_options(timeout=min(10.0, self.timeout_s)).models.with_raw_response.list()
            data = json.loads(raw.text).get("data")
        except (openai.OpenAIError, ValueError, TypeError, AttributeError):
            return None
        return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else None

    def resolve_policy(self) -> Resolved:
        """The name to send and the policy version it samples with (`agents.policy`). Asked before every turn of
        a server that lists versions; one that never did, at most once a minute."""
        now = time.monotonic()
        known = self._policy is not None and self._policy.aliases
        if self._policy is None or known or now - self._policy_at >= POLICY_REPROBE_S:
            cards = self.model_cards()
            self._policy_at = now
            if cards is not None:
                self._policy = resolve(cards, self.model, self.follow_policy)
            elif self._policy is None:
                self._policy = Resolved(self.model, None, False)
            if self.follow_policy and not self._policy.aliases and not self._policy_warned:
                self._policy_warned = True
                log.warning("%s does not say which policy it serves (not started by `ssrkit serve`, or the nccl "
                            "strategy): these rollouts' versions are unknown and `train --follow` cannot bound "
                            "their staleness", self.public_url)
        return self._policy

    def list_models(self) -> list[str] | None:
        """The model names the server offers (`GET /models`), or None when it cannot tell."""
        try:
            return [m.id for m in self._client.with_options(timeout=min(30.0, self.timeout_s)).models.list()]
        except (openai.OpenAIError, ValueError, TypeError, AttributeError):
            return None

    # -- helpers ---------------------------------------------------------------------------------
    def _request(self, messages: list[dict[str, str]], model: str | None = None) -> dict[str, Any]:
        s = self.sampling
        req: dict[str, Any] = {"model": model or self.model, "messages": messages, "temperature": s.temperature,
                               "top_p": s.top_p, "max_tokens": s.max_tokens}
        if s.seed is not None:
            req["seed"] = s.seed
        if s.stop:
            req["stop"] = s.stop
        extra = dict(s.extra_body)
        if self.want_token_ids and self._token_extras_ok:
            req["logprobs"] = True
            extra.setdefault("return_token_ids", True)  # vLLM >= 0.10.2: prompt_token_ids + token_ids
            extra.setdefault("return_tokens_as_token_ids", True)  # older vLLM: ids inside logprobs
        if extra:
            req["extra_body"] = extra
        return req

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass
        base = min(self.backoff_s * (2 ** attempt), self.max_backoff_s)
        return base * (0.75 + 0.5 * random.random())

    def _explain_status(self, e: openai.APIStatusError, attempt: int) -> SsrkitError:
        url = str(e.request.url) if getattr(e, "request", None) is not None else self.base_url
        url = _strip_credentials(url)
        detail = _server_message(e)
        code = e.status_code
        if code in (401, 403):
            if not self._key_set:
                return ModelError(f"the server at {self.public_url} requires an API key: set ${self.api_key_env} "
                                  f"(it is not set) (HTTP {code}: {detail})")
            return ModelError(f"the server at {self.public_url} rejected the API key in ${self.api_key_env} "
                              f"(HTTP {code}: {detail})")
        if code in (404, 405) or (code == 400 and _MODEL_UNKNOWN.search(detail)):
            return self._explain_not_found(url, code, detail)
        if code == 429 or code >= 500 or code == 408:
            return ServerDownError(f"the server at {self.public_url} kept failing: HTTP {code} ({detail}) "
                              f"after {attempt + 1} tries; check the server's log")
        if code in (400, 413, 422) and _CONTEXT.search(detail):
            return ContextLengthError(f"the conversation no longer fits the model's context: {detail}")
        return SsrkitError(f"{url} rejected the request: HTTP {code}: {detail}")

    def _explain_not_found(self, url: str, code: int, detail: str) -> ModelError:
        models = self.list_models()
        if models is not None and self.model not in models:
            offered = ", ".join(models) if models else "none"
            return ModelError(f"the server at {self.public_url} does not serve model {self.model!r}; "
                              f"it offers: {offered}. Pass one of them as the model name")
        if models is None and re.search(r"model", detail, re.I) and not _route_missing(detail):
            return ModelError(f"the server at {self.public_url} does not know model {self.model!r} "
                              f"(HTTP {code}: {detail})")
        return ModelError(f"{url} answered HTTP {code} ({detail}): {base_url_hint(self.base_url)}")

    def _explain_connection(self, e: openai.APIConnectionError, attempt: int) -> ModelError:
        tries = f"after {attempt + 1} tries"
        if isinstance(e, openai.APITimeoutError):
            return ServerDownError(f"the server at {self.public_url} did not answer within {self.timeout_s:g}s "
                              f"({tries}); is it overloaded, or is the timeout too short?")
        if _refused(e):
            return ServerDownError(f"nothing is listening at {self.public_url} ({tries}): start the server "
                              f"(e.g. `vllm serve MODEL --port PORT`) or fix the base URL")
        return ServerDownError(f"could not reach {self.public_url} ({tries}): {_cause(e)}")


# -- response parsing -------------------------------------------------------------------------------

def _parse_completion(data: dict[str, Any], seconds: float) -> Completion:
    """Read text, usage and — in any of the shapes vLLM has used — token ids and log-probs."""
    if not isinstance(data, dict) or not data.get("choices"):
        raise ModelError(f"the server answered without choices: {str(data)[:300]}")
    choice = data["choices"][0]
    message = choice.get("message") or {}
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    lp_content = (choice.get("logprobs") or {}).get("content") or None
    logprobs = None
    if lp_content:
        try:
            logprobs = [float(t["logprob"]) for t in lp_content]
        except (KeyError, TypeError, ValueError):
            logprobs = None
    prompt_ids = _int_list(data.get("prompt_token_ids")) or _int_list(choice.get("prompt_token_ids"))
    completion_ids = _int_list(choice.get("token_ids"))
    if completion_ids is None and lp_content:  # return_tokens_as_token_ids: "token_id:123"
        ids = [str(t.get("token", "")) for t in lp_content if isinstance(t, dict)]
        if ids and all(i.startswith("token_id:") for i in ids):
            completion_ids = _int_list([i.split(":", 1)[1] for i in ids])
    return Completion(
        text=text,
        finish_reason=choice.get("finish_reason"),
        usage=dict(data.get("usage") or {}),
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        logprobs=logprobs,
        seconds=round(seconds, 3),
    )


def _int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not value:
        return None
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        return None


# -- error explanations -----------------------------------------------------------------------------

_CONTEXT = re.compile(r"context length|context window|maximum context|too many tokens|prompt is too long|"
                      r"context_length_exceeded|maximum model length|max_model_len", re.I)


_MODEL_UNKNOWN = re.compile(r"model\b.*\b(not found|does not exist|not exist|unknown|invalid)|unknown model|"
                            r"model_not_found", re.I)


def _refused(e: BaseException) -> bool:
    return bool(re.search(r"refused|connect call failed|errno 111", _cause(e), re.I))


def _server_message(e: openai.APIStatusError) -> str:
    body = e.body
    msg = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            msg = inner.get("message") or inner.get("detail")
        elif isinstance(inner, str):
            msg = inner
        msg = msg or body.get("message") or body.get("detail")
    if not msg:
        try:
            msg = e.response.text
        except Exception:  # noqa: BLE001 - best effort only
            msg = e.message
    return " ".join(str(msg).split())[:400] or "no message"


def _mentions_token_params(e: openai.APIStatusError) -> bool:
    return bool(re.search(r"return_token|logprob|unrecognized|unknown (field|parameter|argument)|extra "
                          r"(fields|inputs)|not permitted", _server_message(e), re.I))


def _route_missing(detail: str) -> bool:
    return detail.strip().lower() in ("not found", "404 page not found", "no message", "method not allowed")


def _cause(e: BaseException) -> str:
    """The innermost reason of a connection error (e.g. 'Connection refused')."""
    seen = []
    cur: BaseException | None = e
    while cur is not None and len(seen) < 6:
        seen.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return " <- ".join(seen)


def _strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), parts.path, "", ""))


def base_url_hint(base_url: str) -> str:
    """What to change in a base URL whose chat route answered 404."""
    url = _strip_credentials(base_url.rstrip("/"))
    path = urlsplit(url).path
    if re.search(r"/v1/v1(/|$)", path):
        return f"the base URL repeats /v1; use {url.replace('/v1/v1', '/v1', 1)}"
    if path.endswith("/chat/completions"):
        return f"the base URL must stop before the route; use {url[: -len('/chat/completions')]}"
    if not path.endswith("/v1"):
        return f"OpenAI-compatible servers serve under /v1; try {url}/v1"
    return "check the base URL: it should be the server's address ending in /v1 (e.g. http://localhost:8000/v1)"
