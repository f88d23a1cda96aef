"""Reading a config file: a bounded, alias-free YAML mapping with no resolver interpolations; and the one-line
message for an OmegaConf error (unknown key with the nearest valid one, wrong type with the expected one).

:func:`load_config` lives here: defaults, then the file, then the overrides, then the checks of
:mod:`mirl.config_checks`. The config tree (:mod:`mirl.config`) imports neither this module nor the checks, so the
three form no cycle. Every refusal is a :class:`mirl.config.ConfigError` naming the file.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from mirl.config import Config, ConfigError
from mirl.config_checks import validate

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


def _all_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        keys.append(key)
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            keys.extend(_all_keys(type(default), key + "."))
    return keys


def _field_type(key: str) -> str:
    cls: Any = Config
    annotation: Any = "a valid value"
    for part in key.split("."):
        match = {f.name: f for f in fields(cls)}.get(part) if is_dataclass(cls) else None
        if match is None:
            return str(annotation)
        annotation = match.type
        default = match.default_factory() if callable(match.default_factory) else match.default
        cls = type(default)
    return f"of type {annotation}"


# keys that were replaced, with why: an old config names the new key and the reason instead of a guess
REPLACED = {
    "diagnostics.regime_mi_fraction": "diagnostics.regime_retrieval_threshold (input dependence is now read from "
    "retrieval above chance; docs/metrics.md, Regimes)",
}


def drop_replaced(source) -> None:
    """Remove the :data:`REPLACED` keys from a config read from a file (in place).

    >>> tree = OmegaConf.create({"diagnostics": {"regime_mi_fraction": 0.1, "every": 5}})
    >>> drop_replaced(tree); OmegaConf.to_container(tree)
    {'diagnostics': {'every': 5}}
    """
    for dotted in REPLACED:
        parent, _, leaf = dotted.rpartition(".")
        node = OmegaConf.select(source, parent) if parent else source
        if OmegaConf.is_dict(node) and leaf in node:
            node.pop(leaf)


def _suggest(key: str) -> str:
    if key in REPLACED:
        return f"; it was replaced by {REPLACED[key]}"
    close = difflib.get_close_matches(key, _all_keys(Config), n=1, cutoff=0.5)
    if not close:
        leaf = key.rsplit(".", 1)[-1]
        close = [k for k in _all_keys(Config) if k.rsplit(".", 1)[-1] == leaf][:1]
    return f"; did you mean '{close[0]}'?" if close else ""


def friendly_error(err: OmegaConfBaseException, source: str) -> ConfigError:
    """The one-line ConfigError for an OmegaConf error met while reading ``source``."""
    key = getattr(err, "full_key", None) or ""
    value = getattr(err, "value", None)
    if isinstance(err, ConfigKeyError | ConfigAttributeError):
        return ConfigError(f"unknown config key '{key}' in {source}{_suggest(key)}")
    if isinstance(err, ValidationError):
        return ConfigError(
            f"config key '{key}' got {value!r} from {source}, but it must be {_field_type(key)}; fix the value"
        )
    return ConfigError(f"config error in {source} at '{key}': {err.msg if hasattr(err, 'msg') else err}")


def apply_override(merged, key: str, value, source: str) -> None:
    """Set ``key`` (dotted, list items by index: ``envs.0.options.size``) to ``value`` in ``merged``, merging a
    mapping value into what is there. An index into a list must name an existing item: the message gives the
    list's length and the form that replaces the whole list.

    >>> from mirl.config import Config
    >>> merged = OmegaConf.structured(Config)
    >>> apply_override(merged, "envs.0.options.size", 5, "override")
    >>> merged.envs[0].options["size"]
    5
    """
    node, parts = merged, key.split(".")
    for depth, part in enumerate(parts):
        if OmegaConf.is_list(node):
            where = ".".join(parts[:depth])
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"{source}: {where} is a list of {len(node)} item(s), so {where}.{part} names none; use "
                    f"{where}.N.<key> with N from 0 to {len(node) - 1}, or replace the list: {where}=[...]"
                )
            node = node[int(part)]
        elif OmegaConf.is_dict(node) and depth < len(parts) - 1:
            node = node.get(part)
        else:
            break
    OmegaConf.update(merged, key, value, merge=True)


def load_config(
    path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = (), *, saved: bool = False
) -> Config:
    """Defaults <- YAML file <- ``key.sub=value`` overrides, checked, as a plain :class:`Config`.

    Resolver interpolations such as ``${oc.env:VAR}`` are refused (an environment variable, often a secret,
    would otherwise be copied into the run name and every file of the run); ``${key.sub}`` references to other
    keys are allowed and are written out resolved. ``saved``: the file is a run's own ``config.yaml``, written by an
    earlier version, so keys that were replaced since (:data:`REPLACED`) are dropped (their successors take their
    defaults) instead of refused: a run made before a rename can still be resumed, evaluated and scored.
    """
    merged = OmegaConf.structured(Config)
    if path is not None:
        source = read_config_file(Path(path))
        if saved:
            drop_replaced(source)
        refuse_resolvers(source, str(path))
        try:
            merged = OmegaConf.merge(merged, source)
        except OmegaConfBaseException as err:
            raise friendly_error(err, str(path)) from None
    for item in overrides:  # applied in order, after the file; list items by index (envs.0.options.size=5)
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value; write e.g. rollout.group_size=8")
        key, raw = item.split("=", 1)
        name = f"override {item!r}"
        try:
            parsed = OmegaConf.from_dotlist([f"value={raw}"])  # the value read as YAML, as on the command line
        except OmegaConfBaseException as err:
            raise friendly_error(err, name) from None
        except yaml.YAMLError as err:  # the value is read as YAML: a control character, an unclosed [ or {
            reason = " ".join(str(err).split("\n")[0].split())
            raise ConfigError(
                f"override {item!r} has a value that is not valid YAML ({reason}); write it as YAML flow and put a "
                "space after each colon, e.g. envs=[{name: frozenlake, options: {size: 4}}]; quote text with special "
                "characters"
            ) from None
        refuse_resolvers(OmegaConf.from_dotlist([item]), name)  # names the key as written
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} has an empty key part; write e.g. rollout.group_size=8")
        try:
            value = OmegaConf.to_container(parsed, resolve=False)["value"]  # ${key.sub} stays a reference
            apply_override(merged, key.strip(), value, name)
        except OmegaConfBaseException as err:
            raise friendly_error(err, name) from None
    try:
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise friendly_error(err, "the merged config") from None
    validate(config)
    return config  # type: ignore[return-value]
