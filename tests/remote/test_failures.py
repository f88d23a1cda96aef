"""Remote failures end the episode with a recorded reason: never a traceback, never a hang (one deadline per call)."""

from __future__ import annotations

import time

import pytest
from PIL import Image

from mirl.envs import make
from mirl.envs.base import TextEnv
from mirl.envs.images import IMAGE_PLACEHOLDER, image_id
from mirl.envs.registry import _REGISTRY, register
from mirl.envs.remote.server import ServeSettings, serving
from mirl.policy.scripted import ScriptedPolicy
from mirl.rollout import run_episodes
from mirl.types import EnvSpec

from .fake_servers import misbehaving
from .helpers import assert_same_episodes, policy_for, rollout_config, served

pytest.importorskip("openenv", reason="the remote envs need openenv 0.10: pip install 'mirl[serve]'")

MOVE = "go</think><answer>Up</answer>"


def play(url: str, episodes: int = 1, **options):
    policy = ScriptedPolicy(__import__("mirl.policy.tiny", fromlist=["x"]).tiny_tokenizer(), lambda context: MOVE)
    specs = [EnvSpec("openenv", seed, {"url": url, **options}) for seed in range(episodes)]
    started = time.monotonic()
    result = run_episodes(policy, specs, 1, rollout_config(max_turns=3))
    return result, time.monotonic() - started


def test_nothing_listening_ends_before_the_first_turn():
    episodes, elapsed = play("http://127.0.0.1:9", timeout_s=5.0)  # port 9 (discard): nothing listens
    assert [ep.end_reason for ep in episodes] == ["remote_refused"]
    assert episodes[0].turns == () and elapsed < 5.0


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("silent", "remote_timeout"),
        ("garbage", "remote_malformed"),
        ("no_text", "remote_malformed"),
        ("huge", "remote_oversized"),
        ("bad_image", "remote_malformed"),
        ("drop", "remote_closed"),
    ],
)
def test_a_failing_step_ends_the_episode_with_its_reason(mode, reason):
    with misbehaving(mode) as url:
        episodes, elapsed = play(url, episodes=3, timeout_s=1.0, max_message_bytes=1 << 20)
    for episode in episodes:
        assert episode.end_reason == reason and not episode.success
        assert len(episode.turns) == 1 and episode.turns[0].observation == "start"
        assert episode.turns[0].reward == 0.0  # a server's failure is not the model's: no format penalty
    assert elapsed < 10.0  # three episodes step concurrently: one deadline, not three


def test_a_silent_reset_times_out_without_a_turn():
    with misbehaving("silent_reset") as url:
        episodes, elapsed = play(url, timeout_s=1.0)
    assert episodes[0].end_reason == "remote_timeout" and episodes[0].turns == () and elapsed < 5.0


def test_server_restart_mid_episode(tok):
    with served("frozenlake") as (url, process):
        calls = []

        def script(context: str) -> str:
            calls.append(context)
            if len(calls) == 2:  # the server dies between the first and the second step
                process.kill()
                process.wait(timeout=20)
            return MOVE

        [episode] = run_episodes(
            ScriptedPolicy(tok, script), [EnvSpec("openenv", 0, {"url": url})], 1, rollout_config(max_turns=4)
        )
    assert episode.end_reason == "remote_closed" and len(episode.turns) == 2
    with served("frozenlake") as (url, _):  # a fresh server: new episodes play to the end
        remote = run_episodes(
            policy_for(tok, "frozenlake", 0), [EnvSpec("openenv", 0, {"url": url})], 1, rollout_config()
        )
    local = run_episodes(policy_for(tok, "frozenlake", 0), [EnvSpec("frozenlake", 0, {})], 1, rollout_config())
    assert_same_episodes(remote, local)


def test_many_episodes_step_concurrently_over_one_pool(tok):
    specs = [EnvSpec("frozenlake", seed, {}) for seed in range(16)]
    with serving("frozenlake") as url:
        remote_specs = [EnvSpec("openenv", spec.seed, {"url": url}) for spec in specs]
        remote = run_episodes(policy_for(tok, "frozenlake", 0), remote_specs, 2, rollout_config())
    local = run_episodes(policy_for(tok, "frozenlake", 0), specs, 2, rollout_config())
    assert_same_episodes(remote, local)


class _Sleepy(TextEnv):
    """Steps take ``delay`` seconds; its observation carries one 3x2 image."""

    action_words = ("Up",)

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay

    @property
    def instruction(self) -> str:
        return "Say Up."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return self.render(), {"success": False, "images": [self._image()]}

    def step(self, action):
        time.sleep(self.delay)
        self.count += 1
        info = {"success": False, "action_valid": True, "action_effective": True, "images": [self._image()]}
        return self.render(), 1.0, False, False, info

    def render(self) -> str:
        return f"count {self.count} {IMAGE_PLACEHOLDER}"

    def _image(self):
        return Image.new("RGB", (3, 2), (self.count * 40 % 256, 7, 200))


@pytest.fixture
def sleepy():
    register("test_sleepy")(_Sleepy)
    yield "test_sleepy"
    _REGISTRY.pop("test_sleepy")


def test_images_travel_as_png_pixel_for_pixel(sleepy):
    local = make(sleepy)
    local_steps = [local.reset(seed=0)] + [local.step("Up")[::4] for _ in range(2)]
    with serving(sleepy) as url:
        remote = make("openenv", url=url)
        remote_steps = [remote.reset(seed=0)] + [remote.step("Up")[::4] for _ in range(2)]
        remote.close()
    for (text, info), (remote_text, remote_info) in zip(local_steps, remote_steps, strict=True):
        assert remote_text == text
        assert [image_id(i) for i in remote_info["images"]] == [image_id(i) for i in info["images"]]


def test_the_server_deadline_ends_a_slow_step(sleepy):
    settings = ServeSettings(step_timeout_s=0.5)
    with serving(sleepy, {"delay": 3.0}, settings) as url:
        remote = make("openenv", url=url, timeout_s=10.0)
        remote.reset(seed=0)
        started = time.monotonic()
        *_, truncated, info = remote.step("Up")
        elapsed = time.monotonic() - started
        remote.close()
    assert truncated and info["end_reason"] == "remote_server" and "deadline" in info["remote_error"]
    assert elapsed < 2.5
