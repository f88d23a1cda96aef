"""``mirl serve-env`` of a task whose reward never returns. Before, the step held its session until the server's
own 60 s deadline, and then the session's env stayed open (``open_envs`` 1, a slot the stateless routes count)
for as long as the call ran: forever. Now the step answers at the task's deadline with the episode ended as
``task_timeout``, the session goes on, and closing it frees its env."""

from __future__ import annotations

import json
import threading
import time
import warnings

import pytest

from mirl.envs.remote.server import ServeSettings
from mirl.envs.task import Task

from ..remote.helpers import get

pytest.importorskip("openenv", reason="serving needs openenv 0.10: pip install 'mirl[serve]'")
pytest.importorskip("websockets", reason="the client speaks WebSocket: pip install 'mirl[serve]'")


def capacity(url: str) -> dict:
    status, body = get(url, "/capacity")
    assert status == 200
    return json.loads(body)


def test_a_hung_reward_answers_at_the_deadline_and_frees_its_session():
    from websockets.sync.client import connect

    release = threading.Event()

    def reward(prompt, answer):
        if answer == "hang":
            release.wait(60)
        return 1.0

    task = Task(["What is 2 + 2?", "What is 3 + 4?"], reward=reward, validation=1, timeout_s=0.5, name="hangs")
    try:
        with warnings.catch_warnings(), task.serving(settings=ServeSettings(max_sessions=2)) as url:
            warnings.simplefilter("ignore")
            with connect(url.replace("http", "ws") + "/ws", proxy=None, open_timeout=10) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                assert json.loads(ws.recv(timeout=10))["type"] == "observation"
                started = time.monotonic()
                ws.send(json.dumps({"type": "step", "data": {"action": "hang"}}))
                reply = json.loads(ws.recv(timeout=10))
                took = time.monotonic() - started
                assert reply["type"] == "observation", reply
                data = reply["data"]
                assert data["done"] is True and data["observation"]["info"]["end_reason"] == "task_timeout"
                assert 0.5 <= took < 3.0, took
                ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))  # the session goes on
                assert json.loads(ws.recv(timeout=10))["type"] == "observation"
                ws.send(json.dumps({"type": "step", "data": {"action": "4"}}))
                assert json.loads(ws.recv(timeout=10))["data"]["reward"] == 1.0
            deadline = time.monotonic() + 5
            while capacity(url)["open_envs"] and time.monotonic() < deadline:
                time.sleep(0.05)
            held = capacity(url)
            assert (held["active_sessions"], held["open_envs"]) == (0, 0), held
            assert task.overdue_calls == 1  # the hung call runs on, on a daemon thread the env does not hold
    finally:
        release.set()
