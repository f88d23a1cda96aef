"""Shared pieces of the veRL integration tests: the tiny tokenizer, a legal-reply script, a small rollout config.

Tests that need veRL itself skip unless it is installed (``bash scripts/test-verl.sh`` builds that environment);
the rest run in the main environment too.
"""

import asyncio
import os
import re

import pytest
import torch

from mirl.config import RolloutConfig
from mirl.policy.tiny import tiny_tokenizer

LEGAL = re.compile(r"Legal actions: ([^.]+)\.")


def legal_reply(context: str) -> str:
    """A well-formed reply: the first two legal actions named in the system prompt, a search for SearchQA and
    WebShop, a program for DeepCoder, a symbol for KeySum, or "42" for other free-form envs.

    Which action comes first alternates with the number of "Turn " markers, so episodes move around; the
    second turn ends with the end-of-turn token instead (an unparsable reply closed by eos).
    """
    turn = context.count("Turn ")
    if turn == 2:
        return " I give up<|im_end|>"
    if "Write a Python program" in context or "Write a Python function" in context:  # DeepCoder
        return f" turn {turn}: guess </think> <answer>\n```python\nprint({turn})\n```\n</answer>"
    if "Question: " in context or "Available actions: search[" in context:  # SearchQA, WebShop
        return f" turn {turn}: look it up </think> <answer> search[item {turn}] </answer>"
    if "Sudoku" in context:  # any digit in the latest board's first blank cell is a legal placement
        rows = [line.replace("|", " ").split() for line in context.splitlines() if re.fullmatch(r"[.\d |]+", line)]
        board = rows[-len(rows[-1]) :]
        row, col = next((r, c) for r, cells in enumerate(board) for c, cell in enumerate(cells) if cell == ".")
        return f" turn {turn}: fill a blank </think> <answer> {row + 1} {col + 1} 1 </answer>"
    if "A key maps letters" in context:  # KeySum: any symbol 0..7 is a legal answer
        return f" turn {turn}: guess </think> <answer> {turn % 8} </answer>"
    match = LEGAL.search(context)
    if match is None:
        return f" turn {turn}: try a number </think> <answer> {40 + turn} </answer>"
    words = [w.strip() for w in match.group(1).split(",")]
    first, second = words[turn % len(words)], words[(turn + 1) % len(words)]
    return f" turn {turn}, go {first} </think> <answer> {first} || {second} </answer>"


@pytest.fixture(name="legal_reply")
def legal_reply_fixture():
    return legal_reply


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()


@pytest.fixture
def rollout_config():
    def make(**overrides):
        values = dict(max_turns=3, max_new_tokens=24, max_context_tokens=100_000, generation_batch_size=64)
        return RolloutConfig(**(values | overrides))

    return make


def expected_mask(episode) -> list[int]:
    """1 on each turn's sampled ids, 0 on env text, over the tokens after the first prompt (no collate call)."""
    first = len(episode.turns[0].context_ids)
    last = episode.turns[-1]
    mask = [0] * (len(last.context_ids) + len(last.response_ids) - first)
    for turn in episode.turns:
        start = len(turn.context_ids) - first
        mask[start : start + len(turn.response_ids)] = [1] * len(turn.response_ids)
    return mask


@pytest.fixture
def mask_of():
    return expected_mask


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tok):
    """A local model directory veRL's HFModelConfig accepts: config.json (one-layer Qwen2) and the tiny tokenizer."""
    from transformers import Qwen2Config

    path = tmp_path_factory.mktemp("model")
    Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def transfer_queue():
    """One local CPU Ray and one TransferQueue for the session (veRL's storage of rollouts between stages).

    Ray starts with num_cpus=4 logical CPUs: TransferQueue's actors hang with fewer than 3. Its workers keep the
    test's own priority (``RAY_worker_niceness=0``): Ray's default lowers them by 15 steps, and beside any other
    busy process they then get about 1 % of a core (one veRL step took 32 minutes instead of about one).
    """
    ray = pytest.importorskip("ray", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")
    tq = pytest.importorskip("transfer_queue", reason="needs veRL 0.9.1: run `bash scripts/test-verl.sh`")
    from omegaconf import OmegaConf

    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"total_storage_size": 2000, "num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()


@pytest.fixture
def verl_episodes(tok, rollout_config, legal_reply):
    """Sokoban episodes as the sampler sees them: played (3 seeds x 2 samples), laid out as veRL rows, rebuilt."""
    from mirl.integrations.verl.episode import episode_from_fields, output_fields
    from mirl.policy.scripted import ScriptedPolicy
    from mirl.rollout import run_episodes
    from mirl.types import EnvSpec

    specs = [EnvSpec("sokoban", seed) for seed in (2, 7, 11)]
    played = run_episodes(ScriptedPolicy(tok, legal_reply), specs, 2, rollout_config(max_new_tokens=64))
    out = []
    for i, episode in enumerate(played):
        f = output_fields(episode)
        out.append(
            episode_from_fields(
                f["prompt_ids"], f["response_ids"], f["extra_fields"]["mirl"], group=i // 2, sample=i % 2
            )
        )
    return out


class ActorWorkers:
    """veRL's actor worker group as the trainer calls it (``compute_log_prob``; data-parallel size 2).

    veRL's real group runs FSDP/Megatron workers, which need GPUs; this one honours the same contract: it reads the
    rows' ids from TransferQueue and writes ``log_probs`` back, one value per position (position t holds
    log p(token t+1 | tokens <= t)), computed by a mirl policy.
    """

    def __init__(self, policy, tq):
        from mirl.integrations.verl.scoring import policy_logprob_fn

        self.score, self.tq, self.rows_seen = policy_logprob_fn(policy), tq, []
        self._dispatch_info = {}  # veRL's RayWorkerGroup caches _query_dispatch_info here

    def _query_dispatch_info(self, _role):
        return [0, 1]  # rank -> data-parallel index: dp size 2

    def compute_log_prob(self, meta):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        data = self.tq.kv_batch_get(
            keys=meta.keys, partition_id=meta.partition_id, select_fields=["prompts", "responses"]
        )
        prompts = [t.tolist() for t in data["prompts"].unbind()]
        responses = [t.tolist() for t in data["responses"].unbind()]
        self.rows_seen.append(len(prompts))
        rows = []
        for prompt, response, scored in zip(prompts, responses, self.score(prompts, responses), strict=True):
            full = torch.zeros(len(prompt) + len(response))  # (T,): position t scores token t+1
            full[len(prompt) - 1 : len(prompt) - 1 + len(response)] = scored
            rows.append({"log_probs": full})
        self.tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=list_of_dict_to_tensordict(rows))
        return meta.keys


@pytest.fixture
def actor_workers(transfer_queue):
    """``actor_workers(policy)``: the actor worker group's stand-in (:class:`ActorWorkers`) over the session's TQ."""
    return lambda policy: ActorWorkers(policy, transfer_queue)


class InProcessManager:
    """``AgentLoopManagerTQ``'s dispatch with its one worker in this process instead of a Ray actor: submits the
    batch to the worker and waits for the groups it started."""

    def __init__(self, worker) -> None:
        self.worker = worker

    def generate_sequences(self, batch) -> None:
        async def run():
            await self.worker.generate_sequences(batch)
            await asyncio.gather(*list(self.worker.background_tasks))

        asyncio.run(run())


@pytest.fixture(scope="session")
def in_process():
    """``in_process(worker)``: an agent-loop manager over one in-process worker (:class:`InProcessManager`)."""
    return InProcessManager
