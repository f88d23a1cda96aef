"""SNR-Aware Filtering as veRL's custom sampler: ``trainer.v1.sampler.custom_sampler`` =
``{path: pkg://mirl.integrations.verl.sampler, name: SNRFilterSampler}``.

A veRL custom sampler owns all group selection of the v1 trainer. :class:`SNRFilterSampler` extends veRL's own
synchronous ``ReplayBuffer``: its ``sample`` first lets the parent wait for ``batch_size`` finished prompt
groups (``data.train_batch_size`` uids, ``rollout.n`` sessions each) exactly as veRL does, then reads their
rewards and mirl records from TransferQueue and keeps only the rows :func:`mirl.integrations.verl.groups.
select_rows` keeps (``select_groups`` with the native ``filter`` block). Dropped rows are cleared from
TransferQueue before any log-prob, value or update is computed, so they cost no update compute; kept rows are
passed on once each (veRL's ``_balance_batch`` later pads with ``is_padding`` rows, never with copies).

An empty selection (no group with signal) discards the step's groups, submits ``batch_size`` fresh prompts
through veRL's refill function and selects again; after ``max_empty_steps`` consecutive empty selections
training stops with an error (the native trainer's ``max_empty_steps`` early stop). Validation is not filtered.

Logged through veRL's logger (the sample's metrics): the native ``filter/*`` and ``rollout/*`` keys.
:attr:`SNRFilterSampler.last` keeps the latest step's selection (episodes before filtering) for the MI
diagnostics hook.
"""

from __future__ import annotations

import logging

import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from mirl.integrations.verl.groups import Row, StepSelection, select_rows
from mirl.integrations.verl.settings import filter_settings

logger = logging.getLogger(__name__)
FIELDS = ["rm_scores", "extra_fields", "prompts", "responses"]


def mirl_record(extra, key: str) -> dict:
    """``extra_fields["mirl"]`` of one row as read from TransferQueue (the agent loop's layout)."""
    extra = getattr(extra, "data", extra)
    if not isinstance(extra, dict) or "mirl" not in extra:
        raise KeyError(
            f"row {key!r} has no extra_fields['mirl']; set actor_rollout_ref.rollout.agent.default_agent_loop=mirl "
            "(and build the data with `mirl verl-data`)"
        )
    return extra["mirl"]


def read_rows(batch: KVBatchMeta) -> list[Row]:
    """The batch's rows from TransferQueue: reward = sum(rm_scores), the mirl record, prompt and response ids."""
    if not batch.keys:
        return []
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
    rows = []
    for i, key in enumerate(batch.keys):
        rows.append(
            Row(
                key=key,
                reward=float(data["rm_scores"][i].sum().item()),
                record=mirl_record(data["extra_fields"][i], key),
                prompt_ids=tuple(data["prompts"][i].tolist()),
                response_ids=tuple(data["responses"][i].tolist()),
            )
        )
    return rows


class SNRFilterSampler(ReplayBuffer):
    """veRL's sync ReplayBuffer followed by mirl's group selection (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config, self.max_empty_steps = filter_settings(self.sampler_kwargs)
        self.empty_streak = 0
        self.last: StepSelection | None = None

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id == "val":
            return batch, metrics
        while True:
            selection = select_rows(read_rows(batch), self.config)
            self.last = selection
            if selection.drop_keys:
                tq.kv_clear(keys=list(selection.drop_keys), partition_id=partition_id)
            self.empty_streak = self.empty_streak + 1 if selection.empty else 0
            out = metrics | selection.metrics | {"filter/empty_streak": float(self.empty_streak)}
            if not selection.empty:
                return self._kept(batch, selection), out
            if self.empty_streak >= self.max_empty_steps:
                raise RuntimeError(
                    f"SNR-Aware Filtering kept no group in {self.empty_streak} consecutive selections (every group's "
                    "rewards were identical); raise mirl.max_empty_steps, loosen mirl.filter, or check the rewards"
                )
            logger.warning("mirl filter kept no group at step %d; refilling %d prompts", global_steps, batch_size)
            self.refill_fn(batch_size)
            batch, metrics = super().sample(global_steps, partition_id, batch_size)

    @staticmethod
    def _kept(batch: KVBatchMeta, selection: StepSelection) -> KVBatchMeta:
        tags = dict(zip(batch.keys, batch.tags, strict=True))
        keys = list(selection.keep_keys)
        return KVBatchMeta(
            keys=keys,
            tags=[tags[key] for key in keys],
            partition_id=batch.partition_id,
            fields=batch.fields,
            extra_info=dict(batch.extra_info or {}),
        )
