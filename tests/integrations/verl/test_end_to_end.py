"""One veRL training step of a shipped mirl setting on CPU, through veRL's own code wherever it runs without a GPU.

The path, each stage veRL's real function or class:

1. ``mirl verl-data`` parquet files -> the trainer's ``_init_dataloader`` (``create_rl_dataset``, ``collate_fn``);
2. ``prepare_step`` -> ``_next_train_batch`` / ``_submit_batch_to_rollout`` -> ``AgentLoopManagerTQ`` -> an
   ``AgentLoopWorkerTQ`` Ray actor, which splits the batch into per-sample kwargs, builds the ``mirl`` agent loop
   with ``hydra.utils.instantiate`` from veRL's registry (filled by the plugin inside that worker), and writes each
   episode through ``_agent_loop_postprocess`` into TransferQueue (rows and tags);
3. the agent loop's requests go through veRL's ``LLMServerClient`` and ``GlobalRequestLoadBalancer``;
4. the replay buffer veRL builds from ``trainer.v1.sampler.custom_sampler`` (mirl's ``SNRFilterSampler``);
5. ``on_sample_end`` (mirl's diagnostics, then veRL's replica sleep), ``_balance_batch``, ``_compute_advantage``
   (GRPO) and ``_compute_metrics`` (veRL's step metrics, then mirl's ``metrics.jsonl``).

What needs a GPU in veRL is replaced, each by something that keeps veRL's contract: the vLLM server by
:class:`~mirl.integrations.verl.local_server.LocalServer` (the tiny model, as a Ray actor, reporting the weights
version as veRL's vLLM server does), the FSDP actor's ``compute_log_prob`` by the conftest's ``ActorWorkers``, and
the old log-probs and the actor update (FSDP) by the sampled log-probs, written where ``_compute_old_log_prob``
writes them. No veRL method is replaced. Needs veRL (``bash scripts/test-verl.sh``); about a minute on 2 cores.
"""

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")

import ray  # noqa: E402
import transfer_queue as tq  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.checkpoint_engine.base import CheckpointEngineManager  # noqa: E402
from verl.trainer.ppo.v1 import AgentLoopManagerTQ, get_trainer_cls  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.router import get_router_handle  # noqa: E402

from mirl.catalogue import unknown_keys  # noqa: E402
from mirl.integrations.verl.data import write_dataset  # noqa: E402
from mirl.integrations.verl.launch import check, compose  # noqa: E402
from mirl.integrations.verl.local_server import LocalServer  # noqa: E402
from mirl.policy.tiny import tiny_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SETTING = ROOT / "configs" / "verl" / "sokoban-grpo-topp09-0.5b-1gpu.yaml"
PROMPTS, SAMPLES, WEIGHTS_VERSION = 4, 4, 0  # step 1 samples with the weights loaded at init (version 0)


def step_config(model_dir: str, data: dict, run_dir: Path):
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={data['train']}",
        f"data.val_files={data['validation']}",
        f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={SAMPLES}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "mirl.rollout.max_turns=2",
        "mirl.rollout.max_new_tokens=16",
        "mirl.diagnostics.every=1",
        "mirl.diagnostics.num_pairs=8",
        "mirl.filter.strategy=top_p",
        "mirl.filter.value=1.0",
        f"trainer.default_local_dir={run_dir}",
        "data.dataloader_num_workers=0",
    ]
    return check(compose(SETTING, overrides))


def start_rollout(config, policy):
    """veRL's LLM client over one tiny-model server, and veRL's agent-loop manager (one AgentLoopWorkerTQ actor)."""
    server = ray.remote(LocalServer).remote(policy)
    ray.get(server.set_global_steps.remote(WEIGHTS_VERSION))  # veRL's checkpoint manager does this on each update
    client = LLMServerClient(config, load_balancer_handle=get_router_handle({"tiny-0": server}))
    return AgentLoopManagerTQ.create(config=config, llm_client=client)


def build_trainer(config, workers):
    """The registered ``mirl`` trainer through veRL's own constructor and CPU set-up steps (not ``init()``, which
    starts FSDP workers and vLLM servers on GPUs)."""
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer._init_resource_pool_mgr()
    checkpoint_config = omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)
    trainer.checkpoint_manager = CheckpointEngineManager(config=checkpoint_config, actor_wg=workers, replicas=[])
    trainer.actor_rollout_wg = workers
    trainer.global_steps = 1  # what fit() sets before its first step
    trainer.curr_step_profile = False
    return trainer


def write_old_log_probs(batch):
    """What ``_compute_old_log_prob`` writes on GPUs; here (bypass mode) the sampled log-probs themselves."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["rollout_log_probs"])
    fields = TensorDict({"old_log_probs": data["rollout_log_probs"]}, batch_size=len(batch))
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)


@pytest.mark.slow
def test_one_training_step_through_verls_code(model_dir, actor_workers, tmp_path):
    data = write_dataset("sokoban", tmp_path / "data", train=PROMPTS * 2, val=2)
    config = step_config(model_dir, data, tmp_path / "run")
    policy = tiny_policy()
    workers = actor_workers(policy)
    trainer = build_trainer(config, workers)
    trainer.agent_loop_manager = start_rollout(config, policy)

    metrics, timing = {}, {"step": 1.0, "gen": 1.0}
    trainer.prepare_step()
    batch, sample_metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=PROMPTS)
    metrics |= sample_metrics
    trainer.on_sample_end()
    kept = len(batch.keys)
    assert kept == SAMPLES * sample_metrics["filter/kept_count"] and kept > 0
    tags = list(batch.tags)

    batch = trainer._balance_batch(batch, metrics=metrics)
    write_old_log_probs(batch)
    batch = trainer._compute_advantage(batch, metrics=metrics)
    trainer._compute_metrics(batch, metrics, timing, global_steps=1, epoch=0)  # int(tag) of the weights versions

    assert all(tag["min_global_steps"] == tag["max_global_steps"] == WEIGHTS_VERSION for tag in tags)

    assert metrics["training/off_policy/trajectory_staleness/max"] == 0  # (step 1 - 1) - version 0
    assert metrics["training/off_policy/trajectory_spans/max"] == 1 and "critic/advantages/mean" in metrics
    # the diagnostics hook scored this step's episodes (the tiny model writes no </think>: empty reasonings)
    assert metrics["diag/trajectory/empty_reasoning"] > 0 and "diag/first_turn/pairs" in metrics
    (line,) = (tmp_path / "run" / "mirl" / "metrics.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["iteration"] == 1 and record["diag/trajectory/pairs"] == metrics["diag/trajectory/pairs"]
    assert record["filter/kept_count"] == sample_metrics["filter/kept_count"] and "time/iteration" in record
    assert unknown_keys(list(record)) == []
    tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
