"""The ``verl.plugins`` entry point: ``import verl`` imports this module in the driver and in every Ray worker.

It registers mirl's names in veRL's registries *when veRL loads those registries*, not at ``import verl``: a
process that never imports veRL's agent loops or v1 trainers pays only for this module
(``benchmarks/verl_import.py`` measures ``import verl`` with and without it).

- agent loop ``mirl`` (:class:`~mirl.integrations.verl.agent_loop.MirlAgentLoop`,
  ``actor_rollout_ref.rollout.agent.default_agent_loop=mirl``): registered right after
  ``verl.experimental.agent_loop.agent_loop`` (which holds veRL's agent-loop registry) is imported;
- trainer ``mirl`` (:class:`~mirl.integrations.verl.trainer.MirlTrainer`, ``trainer.v1.trainer_mode=mirl``):
  registered right after the package ``verl.trainer.ppo.v1`` (veRL's trainers and ``get_trainer_cls``) is imported;
- the sampler needs no registry: ``trainer.v1.sampler.custom_sampler.path=pkg://mirl.integrations.verl.sampler``,
  ``name=SNRFilterSampler`` (veRL imports it when it builds the replay buffer).

The hook (:class:`_AfterImport`) sits on ``sys.meta_path``; it finds each module with the other finders and only
wraps its loader, so the module itself is veRL's, unchanged. A registration that fails (mirl's module does not
import) is a :class:`RuntimeWarning` naming the cause, never an exception inside veRL's import, and veRL's own
error ("agent loop mirl not registered", "Unknown trainer 'mirl'") follows it. veRL loads entry points only with
``VERL_USE_EXTERNAL_PLUGINS`` unset (``auto``) or naming ``mirl``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import warnings
from collections.abc import Callable

AGENT_NAME = "mirl"
TRAINER_NAME = "mirl"
NAMES = {"agent_loop": AGENT_NAME, "trainer": TRAINER_NAME}
SAMPLER = {"path": "pkg://mirl.integrations.verl.sampler", "name": "SNRFilterSampler"}
# veRL module -> the mirl module whose import registers mirl's class in that veRL module's registry
REGISTRATIONS = {
    "verl.experimental.agent_loop.agent_loop": "mirl.integrations.verl.agent_loop",
    "verl.trainer.ppo.v1": "mirl.integrations.verl.trainer",
    "verl.trainer.ppo.core_algos": "mirl.integrations.verl.credit",  # the turn-level advantage estimators
}


def register(mirl_module: str) -> bool:
    """Import ``mirl_module`` (its decorators register it with veRL); on failure warn with the cause, return False."""
    try:
        importlib.import_module(mirl_module)
    except Exception as error:  # any failure must reach the user, not veRL's debug log
        warnings.warn(
            f"mirl's veRL plugin could not import {mirl_module} ({type(error).__name__}: {error}); veRL will not "
            "find the 'mirl' agent loop / trainer. Reinstall mirl with its veRL extra: pip install -e \".[verl]\"",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


class _Loader(importlib.abc.Loader):
    """A module's own loader, then ``after(module_name)`` once the module has executed."""

    def __init__(self, loader, after: Callable[[str], object]) -> None:
        self.loader, self.after = loader, after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # the module keeps veRL's loader
        self.loader.exec_module(module)
        self.after(module.__name__)

    def __getattr__(self, name):  # get_code, get_source, is_package, ...: the wrapped loader's
        return getattr(self.loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``register(REGISTRATIONS[name])`` right after the veRL module ``name`` is imported, once each."""

    def __init__(self, pending: dict[str, str]) -> None:
        self.pending = dict(pending)

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self._done)
                return spec
        return None

    def _done(self, name: str) -> None:
        mirl_module = self.pending.pop(name)
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        register(mirl_module)


def install() -> None:
    """Register at once where veRL's module is already imported; hook the import of the others."""
    pending = {}
    for verl_module, mirl_module in REGISTRATIONS.items():
        if verl_module in sys.modules:
            register(mirl_module)
        else:
            pending[verl_module] = mirl_module
    if pending and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(pending))


try:
    install()
except Exception as error:  # noqa: BLE001  (veRL would log this only at debug level)
    warnings.warn(
        f"mirl's veRL plugin could not install its registration hook ({type(error).__name__}: {error})",
        RuntimeWarning,
        stacklevel=1,
    )
