"""ModelClient against a real HTTP server: retries, actionable errors, token ids, key hygiene."""

from __future__ import annotations

import socket

import pytest

from fixtures.scripted_server import render_prompt, toy_logprob, toy_tokens
from ssrkit.agents import ContextLengthError, ModelClient, ModelError, Sampling
from ssrkit.errors import SsrkitError

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
KEY = "sk-test-very-secret-4242"


def client(server_or_url, model="scripted-model", **kw) -> ModelClient:
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_backoff_s", 0.05)
    return ModelClient(url, model, **kw)


def test_plain_completion_and_sampling_params(serve, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server = serve(["hello there"])
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=123, seed=7, stop=["</x>"],
                       extra_body={"top_k": 20})
    c = client(server, sampling=sampling, want_token_ids=False).complete(MSGS)
    assert c.text == "hello there" and c.finish_reason == "stop"
    assert c.usage["completion_tokens"] == len(b"hello there")
    assert c.prompt_token_ids is None and c.completion_token_ids is None and c.logprobs is None
    body = server.chat_requests[0]["body"]
    assert body["messages"] == MSGS and body["model"] == "scripted-model"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.7, 0.9, 123, 7)
    assert body["stop"] == ["</x>"] and body["top_k"] == 20
    assert "logprobs" not in body and "return_token_ids" not in body
    assert ModelClient(server.base_url, "m").want_token_ids  # asked for by default; a plain server sends none


def test_retries_on_500_and_429_then_succeeds(serve):
    server = serve([{"status": 500, "error": "boom"}, {"status": 429, "headers": {"Retry-After": "0"}},
                    {"status": 503}, "finally"])
    assert client(server, max_retries=3).complete(MSGS).text == "finally"
    assert len(server.chat_requests) == 4


def test_retries_are_bounded(serve):
    server = serve([{"status": 502, "error": "bad gateway"}] * 10)
    with pytest.raises(ModelError, match=r"kept failing: HTTP 502 \(bad gateway\) after 3 tries"):
        client(server, max_retries=2).complete(MSGS)
    assert len(server.chat_requests) == 3


def test_timeout_is_retried_then_explained(serve):
    server = serve([{"delay": 1.5, "content": "late"}, "on time"])
    assert client(server, timeout_s=0.5, max_retries=1).complete(MSGS).text == "on time"
    server2 = serve([{"delay": 1.5, "content": "late"}] * 3)
    with pytest.raises(ModelError, match=r"did not answer within 0.3s"):
        client(server2, timeout_s=0.3, max_retries=0).complete(MSGS)


def test_wrong_api_key_names_the_variable_not_the_key(serve, monkeypatch):
    monkeypatch.setenv("MY_LLM_KEY", "sk-wrong")
    server = serve(["unreachable"], api_key=KEY)
    with pytest.raises(ModelError) as e:
        client(server, api_key_env="MY_LLM_KEY").complete(MSGS)
    assert "rejected the API key in $MY_LLM_KEY" in str(e.value)
    assert "sk-wrong" not in str(e.value)
    assert len(server.chat_requests) == 1  # a 401 is not retried


def test_missing_api_key_says_to_set_it(serve, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve(["unreachable"], api_key=KEY)
    with pytest.raises(ModelError, match=r"requires an API key: set \$OPENAI_API_KEY \(it is not set\)"):
        client(server).complete(MSGS)


def test_key_travels_only_in_the_authorization_header(serve, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server = serve(["ok"], api_key=KEY)
    c = client(server)
    assert c.complete(MSGS).text == "ok"
    assert KEY not in repr(c) and KEY not in str(c.describe())
    (req,) = server.chat_requests
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    others = {k: v for k, v in req["headers"].items() if k != "authorization"}
    assert KEY not in str(others) and KEY not in req["raw"]


def test_unknown_model_lists_the_served_models(serve):
    server = serve(["unreachable"], models=["qwen-7b", "llama-8b"])
    with pytest.raises(ModelError, match=r"does not serve model 'gpt-x'; it offers: qwen-7b, llama-8b"):
        client(server, model="gpt-x").complete(MSGS)


@pytest.mark.parametrize("suffix, hint", [
    ("/v1/v1", "the base URL repeats /v1; use http://127.0.0.1:{port}/v1"),
    ("", "serve under /v1; try http://127.0.0.1:{port}/v1"),
    ("/v1/chat/completions", "must stop before the route; use http://127.0.0.1:{port}/v1"),
])
def test_wrong_base_url_says_what_was_tried_and_the_fix(serve, suffix, hint):
    server = serve(["unreachable"])
    with pytest.raises(ModelError) as e:
        client(f"{server.url}{suffix}").complete(MSGS)
    msg = str(e.value)
    assert f"{server.url}{suffix}/chat/completions answered HTTP 404" in msg
    assert hint.format(port=server.port) in msg


def test_connection_refused_says_start_the_server():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ModelError, match=rf"nothing is listening at http://127.0.0.1:{port}/v1 \(after 2 tries\)"
                                         r": start the server"):
        client(f"http://127.0.0.1:{port}/v1", max_retries=1).complete(MSGS)


def test_context_overflow_is_its_own_error(serve):
    server = serve([{"status": 400, "error": "This model's maximum context length is 4096 tokens. However, "
                                             "you requested 5000 tokens."}])
    with pytest.raises(ContextLengthError, match="maximum context length is 4096"):
        client(server).complete(MSGS)


def test_other_4xx_is_a_plain_error_not_retried(serve):
    server = serve([{"status": 422, "error": "temperature must be >= 0"}])
    with pytest.raises(SsrkitError, match="HTTP 422: temperature must be >= 0") as e:
        client(server).complete(MSGS)
    assert not isinstance(e.value, ModelError)
    assert len(server.chat_requests) == 1


def expected_ids(messages, text):
    return toy_tokens(render_prompt(messages)), toy_tokens(text)


def test_vllm_token_ids_and_logprobs_are_kept(serve):
    server = serve(["héllo"], token_ids="vllm")
    c = client(server, want_token_ids=True).complete(MSGS)
    prompt_ids, completion_ids = expected_ids(MSGS, "héllo")
    assert c.prompt_token_ids == prompt_ids and c.completion_token_ids == completion_ids
    assert c.logprobs == [toy_logprob(i, t) for i, t in enumerate(completion_ids)]
    assert c.usage["prompt_tokens"] == len(prompt_ids)
    body = server.chat_requests[0]["body"]
    assert body["logprobs"] is True and body["return_token_ids"] is True


def test_legacy_vllm_ids_from_logprob_tokens(serve):
    server = serve(["abc"], token_ids="vllm-legacy")
    c = client(server, want_token_ids=True).complete(MSGS)
    prompt_ids, completion_ids = expected_ids(MSGS, "abc")
    assert c.completion_token_ids == completion_ids and c.prompt_token_ids == prompt_ids
    assert len(c.logprobs) == 3


def test_server_ignoring_token_requests_degrades_to_none(serve):
    server = serve(["abc"])
    c = client(server, want_token_ids=True).complete(MSGS)
    assert c.text == "abc" and c.completion_token_ids is None and c.logprobs is None


def test_server_rejecting_token_fields_is_asked_again_without_them(serve):
    server = serve(["one", "two"], token_ids="reject")
    c = client(server, want_token_ids=True)
    assert c.complete(MSGS).text == "one"
    assert c.complete(MSGS).text == "two"
    bodies = [r["body"] for r in server.chat_requests]
    assert bodies[0].get("return_token_ids") and not bodies[1].get("return_token_ids")
    assert not bodies[2].get("logprobs")  # remembered: no more rejected requests


def test_list_models_and_from_dict(serve):
    server = serve([], models=["a", "b"])
    c = ModelClient.from_dict({"base_url": server.base_url + "/", "model": "a", "temperature": 0.2,
                               "max_tokens": 64})
    assert c.list_models() == ["a", "b"]
    assert c.sampling.temperature == 0.2 and c.base_url == server.base_url
    with pytest.raises(SsrkitError, match="unknown model setting"):
        ModelClient.from_dict({"base_url": server.base_url, "model": "a", "temprature": 1})


def test_credentials_in_the_base_url_are_not_recorded():
    c = ModelClient("http://user:pw@example.invalid:8000/v1?key=zzz", "m")
    assert c.public_url == "http://example.invalid:8000/v1"
    assert "pw" not in str(c.describe()) and "zzz" not in repr(c)
