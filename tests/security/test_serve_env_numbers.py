"""``mirl serve-env`` refuses numbers that are not integers where it takes integers, in 4xx, never 500. Before,
``{"split": "train", "index": 1e400}`` on ``/<env>/task`` and ``"start": 1e400`` on ``/<env>/task_range`` got 500
(an overflowing float literal became ``inf``, the strict parse let it through, and FastAPI could not echo it in
its 422), and ``"index": 1e5`` or ``"5"`` was served as task 100000 or 5 (pydantic's lax ints)."""

from __future__ import annotations

import json

import pytest

from mirl.envs.remote.server import serving

from ..remote.helpers import get

pytest.importorskip("openenv", reason="serving needs openenv 0.10: pip install 'mirl[serve]'")

JSON = {"Content-Type": "application/json"}
NOT_INTEGERS = [
    ("/frozenlake/task", b'{"split": "train", "index": 1e400}'),
    ("/frozenlake/task", b'{"split": "train", "index": -1e400}'),
    ("/frozenlake/task", b'{"split": "train", "index": 1e5}'),
    ("/frozenlake/task", b'{"split": "train", "index": 3.0}'),
    ("/frozenlake/task", b'{"split": "train", "index": "5"}'),
    ("/frozenlake/task", b'{"split": "train", "index": true}'),
    ("/frozenlake/task_range", b'{"split": "train", "start": 1e400}'),
    ("/frozenlake/task_range", b'{"split": "train", "start": 0, "stop": 2.5e1}'),
    ("/frozenlake/task_range", b'{"split": "train", "start": "0", "stop": 3}'),
    ("/reset", b'{"seed": 1e400}'),
    ("/reset", b'{"seed": 1e5}'),
    ("/reset", b'{"seed": "7"}'),
    ("/reset", b'{"split": "train", "index": 1e400}'),
]


@pytest.fixture(scope="module")
def url():
    with serving("frozenlake") as served:
        yield served


@pytest.mark.parametrize(("path", "body"), NOT_INTEGERS, ids=[f"{p}:{b.decode()}" for p, b in NOT_INTEGERS])
def test_a_number_that_is_not_an_integer_gets_4xx(url, path, body):
    status, text = get(url, path, JSON, body)
    assert 400 <= status < 500, (status, text[:200])
    assert len(text) < 1000


@pytest.mark.parametrize("kind", ["text/json", "application/vnd.api+json", "APPLICATION/JSON"])
def test_every_json_content_type_is_checked(url, kind):
    status, text = get(url, "/frozenlake/task", {"Content-Type": kind}, b'{"split": "train", "index": 1e400}')
    assert 400 <= status < 500, (kind, status, text[:200])


def test_integers_are_still_served(url):
    status, text = get(url, "/frozenlake/task", JSON, b'{"split": "train", "index": 5}')
    assert status == 200 and json.loads(text)["task"]["index"] == 5
    status, text = get(url, "/frozenlake/task_range", JSON, b'{"split": "validation", "start": 2, "stop": 4}')
    assert status == 200 and [t["seed"] for t in json.loads(text)["tasks"]] == [5, 7]  # 2j + 1
    assert get(url, "/reset", JSON, b'{"seed": 3, "episode_id": "e"}')[0] == 200
    assert get(url, "/health")[0] == 200


def test_a_websocket_reset_with_an_infinite_seed_is_an_error_reply(url):
    pytest.importorskip("websockets", reason="the client speaks WebSocket: pip install 'mirl[serve]'")
    from websockets.sync.client import connect

    with connect(url.replace("http", "ws") + "/ws", proxy=None, open_timeout=10) as ws:
        for data in ('{"seed": 1e400}', '{"split": "train", "index": 1e400}', '{"split": "train", "index": 1e5}'):
            ws.send('{"type": "reset", "data": ' + data + "}")
            assert json.loads(ws.recv(timeout=10))["type"] == "error", data
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))  # the session still works
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
