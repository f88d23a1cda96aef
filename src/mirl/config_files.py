"""Reading a config file: a bounded, alias-free YAML mapping with no resolver interpolations.

Used by :func:`mirl.config.load_config`; every refusal is a :class:`mirl.config.ConfigError` naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mirl.config import ConfigError

_MAX_CONFIG_BYTES = 1 << 20  # a config is a few KB; anything near a megabyte is not one


def read_config_file(path: Path):
    """The YAML mapping at ``path``; a missing, non-regular, huge, malformed or non-mapping file is a ConfigError."""
    if path.is_dir():
        raise ConfigError(f"config path {str(path)!r} is a directory; pass a YAML file such as configs/quickstart.yaml")
    if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
        raise ConfigError(
            f"config path {str(path)!r} is not a regular file (a pipe, socket or device); pass a YAML file such as "
            "configs/quickstart.yaml"
        )
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; see configs/ for the presets")
    if path.stat().st_size > _MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {str(path)!r} is {path.stat().st_size} bytes; a config is at most 1 MiB")
    try:
        text = path.read_text(encoding="utf-8")
        if any(isinstance(token, yaml.AliasToken) for token in yaml.scan(text)):
            raise ConfigError(f"config file {str(path)!r} uses YAML aliases (*name); write the values out")
        mapping = isinstance(yaml.compose(text), yaml.MappingNode)  # OmegaConf reads a bare word as a key
        loaded = OmegaConf.create(text)  # the text already read, not the file a second time
    except (OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {reason}") from None
    if not text.strip():
        raise ConfigError(f"config file {str(path)!r} is empty; pass a preset such as configs/quickstart.yaml")
    if not mapping or not OmegaConf.is_dict(loaded):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys (e.g. rollout: {{group_size: 8}})")
    return loaded


_RESOLVER = re.compile(r"\$\{\s*[\w.\-]+\s*:")


def refuse_resolvers(node, source: str, prefix: str = "") -> None:
    """Raise on any ``${resolver:...}`` value (``oc.env``, ``oc.decode``, ...) in an unresolved config node."""
    container = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node
    items = container.items() if isinstance(container, dict) else enumerate(container)
    for key, value in items:
        where = f"{prefix}{key}" if isinstance(container, dict) else f"{prefix.rstrip('.')}[{key}]"
        if isinstance(value, dict | list):
            refuse_resolvers(value, source, f"{where}.")
        elif isinstance(value, str) and _RESOLVER.search(value):
            raise ConfigError(
                f"config key '{where}' in {source} uses the interpolation {value!r}; resolvers such as "
                "${oc.env:...} are refused so that no environment variable is copied into the run; write the value"
            )
