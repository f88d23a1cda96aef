"""TRL's async path: a ``mirl serve-env`` server, its tasks listed through the TaskProvider routes, played through
``MirlEnvironment`` over mirl's ``openenv`` client, and TRL 1.16's ``AsyncGRPOTrainer`` (and its OpenEnv harness).

What runs on a CPU runs here: the served env against the local one, the task listing, the harness import. The
trainer itself samples from an external vLLM server (weights synced over NCCL) and, in TRL 1.16, cannot even be
built without CUDA; that test skips with TRL's own error. ``MIRL_TRL_VLLM_URL`` (a ``VLLM_SERVER_DEV_MODE=1 vllm
serve`` of the tiny model saved in ``MIRL_TRL_MODEL_DIR``, as ``scripts/gpu-check.sh`` starts it with
``MIRL_CHECK_TRL_ASYNC=1``) makes it train one step instead."""

from __future__ import annotations

import os

import pytest

trl = pytest.importorskip("trl", reason="TRL tests run in .venv-trl: bash scripts/test-trl.sh")

from mirl.integrations.trl import MirlEnvironment  # noqa: E402
from mirl.integrations.trl.environment import served_dataset  # noqa: E402

from ...remote.helpers import served, skip_without_server  # noqa: E402
from .tool_model import tool_tokenizer  # noqa: E402

ROLLOUT = {"max_turns": 3}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def test_trls_openenv_harness_imports():
    try:
        from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker
        from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker
    except ImportError as error:  # openenv missing: bash scripts/test-trl.sh installs the serve extra
        pytest.skip(f"TRL 1.16's OpenEnv harness does not import: {type(error).__name__}: {error}")
    assert issubclass(HarnessRolloutWorker, AsyncRolloutWorker)


def test_served_tasks_play_like_the_local_env():
    skip_without_server()
    with served("frozenlake") as (url, _):
        data = served_dataset(url, 3)
        # the TaskProvider routes list train task i as seed 2i, the same instances as environment_dataset
        assert data["seed"] == [0, 2, 4] and data["task"] == ["train-0", "train-1", "train-2"]
        assert set(data["environment"]) == {"openenv"}
        for row in data:
            remote = MirlEnvironment("openenv", env_options={"url": url}, rollout=ROLLOUT)
            local = MirlEnvironment("frozenlake", rollout=ROLLOUT)
            assert remote.reset(seed=row["seed"], split="train") == local.reset(seed=row["seed"], split="train")
            for answer in ("Down", "Jump", "Right || Down"):
                assert remote.act(answer) == local.act(answer)
            assert (remote.turn_rewards, remote.end_reason) == (local.turn_rewards, local.end_reason)
            assert remote.get_reward() == local.get_reward()


def test_async_grpo_trainer_trains_a_served_env(tmp_path):
    skip_without_server()
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from mirl.policy.tiny import tiny_model

    model_dir = os.environ.get("MIRL_TRL_MODEL_DIR")
    if model_dir is None:
        model_dir = str(tmp_path / "model")
        tiny_model(seed=0).save_pretrained(model_dir)
        tool_tokenizer().save_pretrained(model_dir)
    vllm = os.environ.get("MIRL_TRL_VLLM_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    with served("frozenlake") as (url, _):
        args = AsyncGRPOConfig(
            output_dir=str(tmp_path / "out"), vllm_server_base_url=vllm, vllm_server_timeout=5, max_steps=1,
            num_generations=2, per_device_train_batch_size=4, bf16=False, report_to=[], save_strategy="no",
        )  # fmt: skip
        try:
            trainer = AsyncGRPOTrainer(
                model=model_dir, args=args, train_dataset=served_dataset(url, 2), processing_class=tool_tokenizer(),
                environment_factory=MirlEnvironment.factory("openenv", env_options={"url": url}, rollout=ROLLOUT),
            )  # fmt: skip
            trainer.train()
        except (AssertionError, RuntimeError, TimeoutError, ConnectionError) as error:
            if "MIRL_TRL_VLLM_URL" in os.environ:
                raise
            pytest.skip(
                f"TRL 1.16's AsyncGRPOTrainer needs CUDA and a vLLM server (MIRL_CHECK_TRL_ASYNC=1 bash "
                f"scripts/gpu-check.sh); here it stopped with {type(error).__name__}: {error}"
            )
    assert trainer.state.global_step == 1
