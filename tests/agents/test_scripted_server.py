"""The scripted server run standalone, as Makefile recipes use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from fixtures.paths import FIXTURES
from ssrkit.agents import ModelClient

SERVER = FIXTURES / "scripted_server.py"


def start(args, env=None):
    proc = subprocess.Popen([sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True, env=env)
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
    return proc, url


def test_standalone_json_script_with_key_and_record(tmp_path, monkeypatch):
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(["first", {"content": "second", "finish_reason": "length"}]))
    record = tmp_path / "requests.jsonl"
    env = dict(os.environ, SCRIPTED_KEY="sk-standalone", OPENAI_API_KEY="sk-standalone")
    proc, url = start(["--script", str(script), "--model", "m1", "--record", str(record),
                       "--require-key-env", "SCRIPTED_KEY", "--token-ids", "vllm"], env)
    try:
        with urllib.request.urlopen(url.replace("/v1", "/health")) as r:
            assert r.status == 200
        monkeypatch.setenv("SCRIPTED_TEST_KEY", "sk-standalone")
        client = ModelClient(url, "m1", api_key_env="SCRIPTED_TEST_KEY", want_token_ids=True)
        msgs = [{"role": "user", "content": "hi"}]
        assert client.complete(msgs).text == "first"
        second = client.complete(msgs)
        assert second.finish_reason == "length" and second.completion_token_ids == list(b"second")
        assert client.list_models() == ["m1"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    # one probe for the policy version before the first turn: a server listing none is not asked every turn
    assert [x["path"] for x in lines] == ["/health", "/v1/models", "/v1/chat/completions", "/v1/chat/completions",
                                          "/v1/models"]
    assert "sk-standalone" not in record.read_text()


def test_standalone_python_rule(tmp_path):
    script = tmp_path / "rule.py"
    script.write_text("def SCRIPT(messages, request):\n"
                      "    return 'echo: ' + messages[-1]['content']\n")
    proc, url = start(["--script", str(script)])
    try:
        client = ModelClient(url, "scripted-model")
        assert client.complete([{"role": "user", "content": "ping"}]).text == "echo: ping"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
