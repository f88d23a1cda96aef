"""``MirlTrainer``: veRL's synchronous v1 trainer plus mirl's MI diagnostics and ``metrics.jsonl`` (registered as
``trainer.v1.trainer_mode=mirl``).

It replaces no stage of veRL's step; it adds hooks around them:

- ``on_sample_end`` (after the sampler, before any log-prob): on the schedule of ``mirl.diagnostics``
  (:func:`mirl.diagnostics.run.is_scheduled` of veRL's ``global_steps``), the episodes of the step *before
  filtering* (kept by :class:`~mirl.integrations.verl.sampler.SNRFilterSampler` in ``last``) go through
  :func:`mirl.diagnostics.run.run_diagnostics`, with the actor's ``compute_log_prob`` as the scorer
  (:func:`actor_logprob_fn` under :class:`~mirl.integrations.verl.scoring.RowScorer`): the native ``diag/*`` keys.
- ``_compute_metrics`` (after veRL has computed the step's metrics): the ``diag/*`` numbers join veRL's metrics
  (its logger gets them), and every catalogued key, veRL's own renamed, is appended to
  ``<mirl.run_dir>/metrics.jsonl`` (:class:`~mirl.integrations.verl.metrics_file.MetricsFile`), which
  ``mirl report`` reads. ``diag/*/regime`` strings go only to ``metrics.jsonl`` (veRL's loggers take numbers).
- Turn-level credit (``algorithm.adv_estimator`` = ``mirl_turn`` or ``mirl_step_groups``, see
  :mod:`mirl.integrations.verl.credit`): ``on_sample_end`` rewrites the sampled rows' ``rm_scores`` in
  TransferQueue with each turn's reward on its last sampled token (:func:`write_turn_rewards`; the row sums, the
  episode returns, are unchanged), and for ``mirl_step_groups`` ``_compute_advantage`` runs veRL's own advantage
  stage inside :func:`~mirl.integrations.verl.credit.row_records` with the rows' layouts, read in the order veRL
  reads the rows, so the estimator sees each turn's ``state_key``. Other estimators see veRL's rows unchanged.

veRL branches on ``trainer_mode == "sync"`` in several places, so the trainer reports ``"sync"`` whatever the
configured name (its parameter-sync settings are read from ``trainer.v1.sync``). Pair draws use
``torch.Generator().manual_seed(seed * 1_000_003 + step)`` with mirl's default ``trainer.seed``, as the native
trainer seeds them per iteration.
"""

from __future__ import annotations

import uuid

import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.utils.padding import response_from_nested

from mirl.diagnostics.run import DiagnosticsState, is_scheduled, run_diagnostics
from mirl.integrations.verl.credit import STEP_ESTIMATOR, TURN_ESTIMATORS, place_turn_rewards, row_records
from mirl.integrations.verl.metrics_file import MetricsFile
from mirl.integrations.verl.plugin import TRAINER_NAME
from mirl.integrations.verl.sampler import mirl_record
from mirl.integrations.verl.scoring import LogprobFn, RowScorer
from mirl.integrations.verl.settings import read_settings
from mirl.rollout.prompts import EXAMPLE_REASONINGS

PARTITION = "mirl_diag"


def score_rows(prompt: list[int], response: list[int]) -> dict:
    """One scoring row in the layout veRL's agent-loop worker writes (text models: positions 0..T-1)."""
    input_ids = torch.tensor(prompt + response, dtype=torch.int64)  # (T,)
    return {
        "prompts": torch.tensor(prompt, dtype=torch.int64),
        "responses": torch.tensor(response, dtype=torch.int64),
        "response_mask": torch.ones(len(response), dtype=torch.int64),
        "loss_mask": torch.ones(len(response), dtype=torch.int64),
        "input_ids": input_ids,
        "position_ids": torch.arange(input_ids.shape[0], dtype=torch.int64),
    }


def actor_logprob_fn(worker_group, dp_size: int) -> LogprobFn:
    """Rows scored by the actor worker group's ``compute_log_prob`` at temperature 1, through TransferQueue.

    The rows go to a partition of their own (``mirl_diag``), are padded to a multiple of the data-parallel size
    with copies of the first row (scored and discarded), and are cleared after reading ``log_probs`` back.
    """

    def logprobs(prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        rows = [score_rows(p, r) for p, r in zip(prompts, responses, strict=True)]
        rows += [rows[0]] * (-len(rows) % dp_size)
        keys = [f"mirl-diag-{uuid.uuid4().hex}" for _ in rows]
        tags = [{"seq_len": int(row["input_ids"].shape[0])} for row in rows]
        tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(rows), tags=tags, partition_id=PARTITION)
        try:
            meta = KVBatchMeta(
                keys=keys,
                tags=tags,
                partition_id=PARTITION,
                extra_info={"calculate_entropy": False, "compute_loss": False, "temperature": 1.0},
            )
            worker_group.compute_log_prob(meta)
            data = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=["log_probs", "response_mask"])
            scored = response_from_nested(data["log_probs"], data["response_mask"]).unbind()
        finally:
            tq.kv_clear(keys=keys, partition_id=PARTITION)
        return [scored[i].float().cpu() for i in range(len(prompts))]

    return logprobs


def read_records(keys: list[str], partition_id: str) -> list[dict]:
    """The rows' ``extra_fields["mirl"]`` layouts from TransferQueue, in the order of ``keys``."""
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    return [mirl_record(data["extra_fields"][i], key) for i, key in enumerate(keys)]


def write_turn_rewards(keys: list[str], partition_id: str) -> None:
    """Replace the rows' ``rm_scores`` in TransferQueue by each turn's reward on its last sampled token
    (:func:`~mirl.integrations.verl.credit.place_turn_rewards` of the row's layout; 0 elsewhere)."""
    if not keys:
        return
    records = read_records(keys, partition_id)
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["responses"])
    rows = [
        {"rm_scores": place_turn_rewards([record], int(data["responses"][i].shape[0]))[0]}
        for i, record in enumerate(records)
    ]
    tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=list_of_dict_to_tensordict(rows))


@register_trainer(TRAINER_NAME)
class MirlTrainer(PPOTrainerSync):
    """veRL's sync trainer with mirl's diagnostics hook and metrics file (module docstring)."""

    @property
    def trainer_mode(self) -> str:
        """Always ``"sync"``: veRL branches on this name (refills, checkpoints, sampler class), and this trainer
        is its sync trainer in every one of those branches; ``trainer.v1.trainer_mode=mirl`` only picks the class.
        """
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, _name: str) -> None:  # veRL's __init__ assigns the configured name
        pass

    def __init__(self, config):
        super().__init__(config)
        self.mirl = read_settings(config)
        self.metrics_file = MetricsFile(self.mirl.run_dir)
        self.diagnostics_state = DiagnosticsState.from_config(self.mirl.diagnostics)
        self.pending_diagnostics: dict = {}

    def on_sample_end(self):
        super().on_sample_end()
        selection = getattr(self.replay_buffer, "last", None)
        if self.config.algorithm.adv_estimator in TURN_ESTIMATORS and selection is not None:
            write_turn_rewards(list(selection.keep_keys), "train")
        self.pending_diagnostics |= self.diagnose(self.global_steps)

    def _compute_advantage(self, batch, metrics):
        if self.config.algorithm.adv_estimator != STEP_ESTIMATOR:
            return super()._compute_advantage(batch, metrics)
        with row_records(read_records(list(batch.keys), batch.partition_id)):
            return super()._compute_advantage(batch, metrics)

    def diagnose(self, step: int) -> dict:
        """The ``diag/*`` keys of ``step`` (empty when not scheduled or the sampler kept no episodes)."""
        config = self.mirl.diagnostics
        selection = getattr(self.replay_buffer, "last", None)
        if not config.enabled or selection is None or not is_scheduled(step, config.every):
            return {}
        dp_size = max(self.actor_rollout_wg._query_dispatch_info("actor")) + 1
        scorer = RowScorer(self.tokenizer, actor_logprob_fn(self.actor_rollout_wg, dp_size))
        generator = torch.Generator().manual_seed(self.mirl.config.trainer.seed * 1_000_003 + step)
        return run_diagnostics(
            scorer,
            selection.episodes,
            config,
            self.diagnostics_state,
            generator=generator,
            format_reasoning=EXAMPLE_REASONINGS,
        )

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        diagnostics, self.pending_diagnostics = self.pending_diagnostics, {}
        metrics.update({k: v for k, v in diagnostics.items() if not isinstance(v, str)})
        self.metrics_file.write(global_steps, metrics | diagnostics)
