"""Every turn records the policy version that sampled it, read from the server's /v1/models (issue #28 item 1)."""

from __future__ import annotations

import threading
import time

from fixtures.scripted_server import ScriptedServer

from ssrkit.agents import ModelClient
from ssrkit.agents.policy import resolve
from ssrkit.agents.trajectory import Trajectory
from ssrkit.store.trajectory import turn_versions

MSGS = [{"role": "user", "content": "hi"}]
S5, S6 = "ssrkit-policy-s000005-aaaaaaaaaaaa", "ssrkit-policy-s000006-bbbbbbbbbbbb"


def cards(*entries):
    return [{"id": i, "object": "model", "root": root, "parent": parent} for i, root, parent in entries]


def client(server, model="policy", **kw):
    return ModelClient(server.base_url, model, backoff_s=0.01, max_backoff_s=0.02, **kw)


def test_each_turn_records_the_version_and_a_refresh_between_turns_shows_two(serve, tmp_path):
    server = serve(["one", "two", "three"], models=["policy", S5, S6])
    server.cards = cards(("policy", "/ckpt/a", None), (S5, "/ckpt/a", None))  # restart strategy: same root
    c = client(server)
    traj = Trajectory("solver", model={}, limits={}, path=tmp_path / "trajectory.json")
    traj.add_turn(c.complete(MSGS))
    traj.add_turn(c.complete(MSGS))
    server.cards = cards(("policy", "/ckpt/b", None), (S6, "/ckpt/b", None))  # restarted on step 6
    traj.add_turn(c.complete(MSGS))
    assert [b["body"]["model"] for b in server.chat_requests] == ["policy"] * 3
    assert turn_versions(Trajectory.load(tmp_path / "trajectory.json")) == [
        {"step": 5, "id": "a" * 12}, {"step": 5, "id": "a" * 12}, {"step": 6, "id": "b" * 12}]


def test_follow_sends_the_newest_adapter_and_reresolves_after_an_unload(serve):
    server = serve([{"status": 404, "error": "The model does not exist."}, "ok"], models=["policy", S5, S6])
    server.cards = cards(("policy", "/base", None), (S5, "/a5", "policy"), (S6, "/a6", "policy"))
    c = client(server, follow_policy=True)
    done = c.complete(MSGS)
    assert done.text == "ok" and done.policy == {"step": 6, "id": "b" * 12}
    assert [r["body"]["model"] for r in server.chat_requests] == [S6, S6]
    assert client(server).resolve_policy().name == "policy"  # without follow the name is sent as given


def test_a_plain_server_gives_null_and_is_not_polled_every_turn(serve, tmp_path):
    server = serve(["a", "b", "c", "d", "e"], models=["m"])
    c = client(server, model="m", follow_policy=True)
    traj = Trajectory("solver", model={}, limits={}, path=tmp_path / "trajectory.json")
    for _ in range(5):
        traj.add_turn(c.complete(MSGS))
    assert turn_versions(Trajectory.load(tmp_path / "trajectory.json")) == [None] * 5
    assert sum(r["path"] == "/v1/models" for r in server.requests) == 1


def test_a_turn_waits_for_a_restarting_server_and_records_the_wait(tmp_path):
    first = ScriptedServer(["x"], models=["m"]).start()
    port = first.port
    first.stop()
    holder = {}

    def restart():
        time.sleep(2.0)
        holder["s"] = ScriptedServer(["back"], models=["m"], port=port).start()

    threading.Thread(target=restart, daemon=True).start()
    c = ModelClient(f"http://127.0.0.1:{port}/v1", "m", backoff_s=0.01, max_backoff_s=0.02, server_wait_s=30)
    try:
        done = c.complete(MSGS)
    finally:
        time.sleep(0.1)
        holder.get("s") and holder["s"].stop()
    assert done.text == "back" and done.server_wait_s >= 1.0


def test_resolve_rules():
    base = ("policy", "/b", None)
    assert resolve(cards(base), S5, False).version == {"step": 5, "id": "a" * 12}  # an alias sent as the model
    assert resolve(cards(base, (S5, "/b", None)), "policy", False).version["step"] == 5  # sibling: same root
    assert resolve(cards(base, (S5, "/other", None)), "policy", False).version is None  # another checkpoint's
    r = resolve(cards(base, (S5, "/b", None), (S6, "/a6", "policy")), "policy", True)
    assert (r.name, r.version["step"]) == (S6, 6)
    r = resolve(cards(base, (S6, "/a6", "other-base")), "policy", True)
    assert (r.name, r.version, r.aliases) == ("policy", None, True)  # an adapter of another base is not ours
