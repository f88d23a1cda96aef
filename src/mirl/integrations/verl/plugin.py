"""The ``verl.plugins`` entry point: ``import verl`` imports this module in the driver and in every Ray worker.

Importing it registers mirl's names in veRL's registries:

- agent loop ``mirl`` (:class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop`):
  ``actor_rollout_ref.rollout.agent.default_agent_loop=mirl``;
- trainer ``mirl`` (:class:`~mirl.integrations.verl.trainer.MirlTrainer`, diagnostics and ``metrics.jsonl``):
  ``trainer.v1.trainer_mode=mirl``;
- the sampler needs no registry: ``trainer.v1.sampler.custom_sampler.path=pkg://mirl.integrations.verl.sampler``,
  ``name=SNRFilterSampler``.

veRL loads entry points with ``VERL_USE_EXTERNAL_PLUGINS`` unset (``auto``) or naming ``mirl``; it logs a failed
plugin only at debug level, so :data:`NAMES` lets a check (``mirl verl-config``, the tests) confirm it.
"""

from __future__ import annotations

from mirl.integrations.verl import agent_loop, credit, sampler, trainer  # noqa: F401 (credit registers estimators)

NAMES = {"agent_loop": agent_loop.AGENT_NAME, "trainer": trainer.TRAINER_NAME}
SAMPLER = {"path": f"pkg://{sampler.__name__}", "name": sampler.SNRFilterSampler.__name__}
