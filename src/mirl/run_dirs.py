"""Telling a mirl run directory from a model: light path checks (no torch), so commands can read a run's config
and check it before importing the heavy libraries."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunWeights:
    """A mirl run directory named as a model: its ``config.yaml`` names the base model (and LoRA settings),
    ``checkpoint`` (a ``checkpoints/iteration_N`` directory holding ``state.pt``) the trained weights;
    None = the run's newest complete checkpoint."""

    run_dir: Path
    checkpoint: Path | None


def find_run_weights(name: str | os.PathLike) -> RunWeights | None:
    """``RUN`` (a directory with ``config.yaml``) or ``RUN/checkpoints/iteration_N`` -> RunWeights, else None."""
    path = Path(name).expanduser()
    if (path / "config.yaml").is_file() and not (path / "config.json").is_file():
        return RunWeights(path, None)
    run_dir = path.parent.parent
    if (path / "state.pt").is_file() and path.parent.name == "checkpoints" and (run_dir / "config.yaml").is_file():
        return RunWeights(run_dir, path)
    return None


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # org/name


def looks_like_path(name: str) -> bool:
    """Whether a model name means a local path rather than a hub id ``org/name``: it starts with ``.``, ``/`` or
    ``~``, is not of the form ``org/name``, or its first part is a local directory (``runs/typo`` when ``runs/``
    exists here).

    >>> looks_like_path("HuggingFaceTB/SmolLM2-135M-Instruct"), looks_like_path("./model"), looks_like_path("a/b/c")
    (False, True, True)
    """
    if name.startswith((".", "/", "~")) or not HUB_ID.match(name):
        return True
    return Path(name.split("/", 1)[0]).is_dir()


# names mirl.policy.sources resolves itself
BUILTIN_NAMES = ("smollm2-135m-instruct", "keysum-organism", "keysum1-organism")


def check_model_name(name: str, builtins: tuple[str, ...] = BUILTIN_NAMES, probe_hub: bool = True) -> None:
    """Refuse, before any download, a model name that cannot be loaded: a path that does not exist, or (with
    ``probe_hub``) a hub id that is not in the local Hugging Face cache while the hub cannot be reached (one TCP
    connection attempt, :func:`hub_reachable`) or ``HF_HUB_OFFLINE`` is set."""
    from mirl.errors import UserError

    if name.strip().lower() in builtins or Path(name).expanduser().exists():
        return
    if looks_like_path(name):
        raise UserError(
            f"model path {name!r} does not exist; pass an existing run directory, model directory or .gguf file "
            "(or a hub id org/name)"
        )
    if not probe_hub:
        return
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    if offline or not hub_reachable():
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
        raise UserError(
            f"model {name!r} is not in the local Hugging Face cache and {why}; download it where the hub is "
            "reachable, or pass a local model directory"
        )


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the hub (``HF_ENDPOINT``, default huggingface.co) opens within ``timeout_s``."""
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True
