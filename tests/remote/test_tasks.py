"""OpenEnv's task API on a mirl server: the trainer's train and validation splits are listed, a task is the seed the
trainer gives it, bad splits and indices get 4xx, and both ``openenv``'s own client and mirl's ``openenv`` env reset
by split and index (mirl's falls back to seeded resets on a server that lists no tasks)."""

from __future__ import annotations

import json

import pytest

from mirl.envs import make
from mirl.envs.remote.server import serving
from mirl.envs.remote.tasks import MAX_LISTED_TASKS, TASKS_PER_SPLIT, index_for_seed, task_seed
from mirl.trainer.specs import train_seed, validation_seed

from .fake_servers import RESET_REPLY, websocket_server
from .helpers import get

pytest.importorskip("openenv", reason="the remote envs need openenv 0.10: pip install 'mirl[serve]'")

JSON = {"Content-Type": "application/json"}


def post(url: str, path: str, body) -> tuple[int, object]:
    status, raw = get(url, path, JSON, json.dumps(body).encode())
    return status, json.loads(raw)


def test_the_splits_are_the_trainers():
    # validation task j is the trainer's validation instance j; a training seed s is task s // 2 of train
    assert [task_seed("validation", j) for j in range(4)] == [validation_seed(j) for j in range(4)] == [1, 3, 5, 7]
    for seed in (train_seed(0, 0, 0), train_seed(42, 7, 3), train_seed(2_000_000, 10**4, 4095)):
        assert task_seed("train", index_for_seed(seed, TASKS_PER_SPLIT)) == seed
    assert task_seed("validation", index_for_seed(validation_seed(9), TASKS_PER_SPLIT)) == validation_seed(9)


def test_a_served_env_lists_both_splits_and_their_tasks():
    with serving("frozenlake") as url:
        assert json.loads(get(url, "/list_environments")[1]) == ["frozenlake"]
        assert json.loads(get(url, "/frozenlake/splits")[1]) == [
            {"name": "train", "type": "train"},
            {"name": "validation", "type": "validation"},
        ]
        assert post(url, "/frozenlake/num_tasks", {"split": "validation"}) == (200, {"num_tasks": 2**53})
        status, reply = post(url, "/frozenlake/task", {"split": "validation", "index": 3})
        assert status == 200
        expected = {"id": "validation-3", "env": "frozenlake", "split": "validation", "index": 3, "seed": 7}
        assert reply["task"] == expected
        status, reply = post(url, "/frozenlake/task_range", {"split": "train", "start": 10, "stop": 13})
        assert [task["seed"] for task in reply["tasks"]] == [20, 22, 24]
        status, reply = post(url, "/frozenlake/tasks", {"split": "validation"})  # a preview: num_tasks has the count
        assert status == 200 and len(reply["tasks"]) == MAX_LISTED_TASKS
        assert reply["tasks"][-1]["seed"] == 2 * MAX_LISTED_TASKS - 1


def test_a_split_option_serves_that_split_only():
    with serving("countdown", {"split": "validation"}) as url:
        assert json.loads(get(url, "/countdown/splits")[1]) == [{"name": "validation", "type": "validation"}]
        assert post(url, "/countdown/num_tasks", {"split": "train"})[0] == 422
        assert post(url, "/reset", {"split": "train", "index": 0})[0] == 422
        status, reply = post(url, "/reset", {"split": "validation", "index": 2})
    local, _ = make("countdown", split="validation").reset(seed=5)
    assert status == 200 and reply["observation"]["observation"] == local


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/frozenlake/num_tasks", {"split": "test"}, 422),  # a split the server does not list
        ("/frozenlake/num_tasks", {"split": ["train"]}, 422),
        ("/frozenlake/num_tasks", {}, 422),
        ("/frozenlake/task", {"split": "train", "index": -1}, 400),
        ("/frozenlake/task", {"split": "train", "index": 2**53}, 400),  # one past the last task
        ("/frozenlake/task", {"split": "train", "index": 10**19}, 400),
        ("/frozenlake/task", {"split": "train", "index": 1.5}, 422),
        ("/frozenlake/task", {"split": "nope", "index": 0}, 422),
        ("/frozenlake/task_range", {"split": "train"}, 422),  # the whole split: above the listing bound
        ("/frozenlake/task_range", {"split": "train", "start": 0, "stop": MAX_LISTED_TASKS + 1}, 422),
        ("/frozenlake/task_range", {"split": "train", "start": -(10**19)}, 422),
        ("/elsewhere/splits", None, 404),  # another env's name
        ("/reset", {"split": "validation"}, 422),  # a task reset names both
        ("/reset", {"index": 3}, 422),
        ("/reset", {"split": "validation", "index": 3, "seed": 7}, 422),  # a task or a seed, not both
        ("/reset", {"split": "validation", "index": 2**53}, 422),
        ("/reset", {"split": "validation", "index": "3"}, 422),
        ("/reset", {"split": "test", "index": 0}, 422),
    ],
)
def test_bad_splits_and_indices_get_4xx(task_server, path, body, expected):
    status, text = get(task_server, path, JSON, None if body is None else json.dumps(body).encode())
    assert status == expected, (status, text[:300])


@pytest.fixture(scope="module")
def task_server():
    with serving("frozenlake") as url:
        yield url


def test_a_bad_task_reset_in_a_session_is_an_error_and_the_session_survives(task_server):
    from websockets.sync.client import connect

    with connect(task_server.replace("http", "ws") + "/ws", proxy=None, open_timeout=10) as ws:
        for data in ({"split": "test", "index": 0}, {"split": "train", "index": -1}, {"split": "train"}):
            ws.send(json.dumps({"type": "reset", "data": data}))
            reply = json.loads(ws.recv(timeout=10))
            assert reply["type"] == "error", reply
        ws.send(json.dumps({"type": "reset", "data": {"split": "validation", "index": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"


def test_openenvs_own_client_resets_by_split_and_index():
    # countdown takes a split option: the session builds the env of the task's split, switching when it changes
    from openenv.core.generic_client import GenericEnvClient

    with serving("countdown") as url, GenericEnvClient(base_url=url).sync() as client:
        validation = client.reset(split="validation", index=2).observation["observation"]
        train = client.reset(split="train", index=2).observation["observation"]
        seeded = client.reset(seed=4).observation["observation"]  # a plain reset: the served options (train)
        step = client.step({"action": "1 + 2"})
    assert validation == make("countdown", split="validation").reset(seed=5)[0]
    assert train == seeded == make("countdown", split="train").reset(seed=4)[0]
    assert validation != train and step.done


def test_the_openenv_env_plays_a_task_as_the_local_env_plays_its_seed():
    with serving("countdown") as url:
        remote = make("openenv", url=url)
        for split, seed in (("validation", 7), ("train", train_seed(3, 5, 2))):
            played = remote.reset(seed=seed, options={"split": split})
            local = make("countdown", split=split)
            assert played[0] == local.reset(seed=seed)[0]
            assert remote.step("(1 + 2)")[:4] == local.step("(1 + 2)")[:4]
        by_index = remote.reset(seed=0, options={"split": "validation", "index": 3})[0]
        remote.close()
    assert by_index == make("countdown", split="validation").reset(seed=7)[0]


def test_a_task_of_a_split_the_server_does_not_list_ends_the_episode():
    with serving("countdown", {"split": "train"}) as url:
        env = make("openenv", url=url)
        observation, info = env.reset(seed=1, options={"split": "validation"})
    assert observation == "" and info["end_reason"] == "remote_server"
    assert "lists the splits 'train', not 'validation'" in info["remote_error"]


def test_a_server_without_the_task_api_gets_seeded_resets():
    # openenv's own server around an env without TaskProvider: /splits answers 501, the reset falls back to the seed
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class Said(Action):
        message: str

    class Heard(Observation):
        text: str = ""

    class Echo(Environment):
        def reset(self, seed=None, episode_id=None, **extra):
            return Heard(text=f"seed {seed}; extra {sorted(extra)}")

        def step(self, action, timeout_s=None, **extra):
            return Heard(text=action.message, done=True, reward=1.0)

        @property
        def state(self):
            return State()

    from fastapi import FastAPI

    app = FastAPI()
    HTTPEnvServer(Echo, Said, Heard).register_routes(app)
    with uvicorn_thread(app) as url:
        assert get(url, "/Echo/splits")[0] == 501
        env = make("openenv", url=url, action_field="message", observation_field="text")
        assert env.reset(seed=6, options={"split": "validation"})[0] == "seed 6; extra []"
        assert env.step("hi")[:3] == ("hi", 1.0, True)
        env.close()


def test_a_websocket_only_server_gets_seeded_resets():
    seen = []

    async def handler(websocket):
        async for raw in websocket:
            seen.append(json.loads(raw))
            if seen[-1]["type"] == "reset":
                await websocket.send(json.dumps(RESET_REPLY))

    with websocket_server(handler) as url:
        env = make("openenv", url=url)
        observation, info = env.reset(seed=3, options={"split": "train"})
        env.close()
    assert observation == "start" and "end_reason" not in info
    assert seen[0] == {"type": "reset", "data": {"seed": 3}}


def uvicorn_thread(app):
    import uvicorn

    from mirl.envs.remote.server import bind, running

    sock = bind("127.0.0.1", 0)
    return running(uvicorn.Server(uvicorn.Config(app, log_level="warning")), sock)


def test_the_trainer_plays_each_split_on_one_server():
    """mirl train passes split=train / split=validation to an env that takes one, and the openenv env's resets
    without options then play that split's tasks: on a mirl server, the local env's episodes for those seeds."""
    from mirl.config_files import load_config
    from mirl.trainer.specs import train_specs, validation_specs

    with serving("countdown") as url:
        config = load_config(None, [f"envs=[{{name: openenv, options: {{url: '{url}'}}}}]"])
        for spec, split in ((train_specs(config, 2)[0], "train"), (validation_specs(config)[1], "validation")):
            assert spec.options["split"] == split
            remote = make(spec.env, **spec.options)
            played = remote.reset(seed=spec.seed)[0]
            remote.close()
            assert played == make("countdown", split=split).reset(seed=spec.seed)[0]
