"""``mirl train --help-config``: every config key with its default, the values it accepts (the checks in
``mirl/config_checks.py``) and the comment that documents it in ``mirl/config.py``."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields, is_dataclass

import mirl.config as config_module


def _comments(cls: type) -> dict[str, str]:
    """field name -> the comment lines right above it in the class body."""
    source = inspect.getsource(cls).splitlines()
    tree = ast.parse(inspect.getsource(cls))
    out = {}
    for node in tree.body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            lines, row = [], node.lineno - 2
            while row >= 0 and source[row].strip().startswith("#"):
                lines.insert(0, source[row].strip().lstrip("# "))
                row -= 1
            out[node.target.id] = " ".join(lines)
    return out


def config_help(cls: type = config_module.Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, documentation) for every leaf key."""
    rows = []
    comments = _comments(cls)
    for f in fields(cls):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if is_dataclass(default):
            rows += config_help(type(default), f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", repr(default), comments.get(f.name, "")))
    return rows


SPECIAL = {
    "envs": "a list of {name, weight > 0, options} (mirl envs lists names and options)",
    "model.device": "auto, cpu, mps, cuda, cuda:N, xpu or xpu:N",
    "trainer.name": "one path component of letters, digits and _ . + = , @ - (or none)",
    "diagnostics.scopes": "a list of first_turn, trajectory, turn_position",
    "diagnostics.ks": "a non-empty list of whole numbers >= 1",
}


def key_range(key: str, default: str) -> str:
    """What ``key`` accepts, from the checks in :mod:`mirl.config_checks`.

    >>> key_range("rollout.group_size", "16"), key_range("filter.mode", "'linear'"), key_range("x.flag", "True")
    ('>= 1', 'one of linear, softmax', 'true or false')
    """
    import mirl.config_checks as checks

    def shown(allowed) -> str:
        return "any finite number" if allowed.lo == -checks.INF and allowed.hi == checks.INF else str(allowed)

    optional = " (or none)" if default == "None" else ""
    if key in checks.CHOICES:
        return f"one of {', '.join(checks.CHOICES[key])}"
    if key in checks.OPTIONAL_CHOICES:
        return f"none or one of {', '.join(checks.OPTIONAL_CHOICES[key])}"
    if key in checks.RANGES:
        return f"{shown(checks.RANGES[key])}{optional}"
    if key == "filter.value":
        return "; ".join(f"{strategy}: {shown(allowed)}" for strategy, allowed in checks.FILTER_VALUE.items())
    if default in ("True", "False"):
        return "true or false"
    return SPECIAL.get(key, f"text{optional}")


def print_config_help(file=None) -> None:
    """A table on a terminal; otherwise one tab-separated line per key (key, default, range, meaning), unwrapped,
    so that ``mirl train --help-config | grep lr`` shows whole rows."""
    import sys

    file = file if file is not None else sys.stdout
    rows = [(key, default, key_range(key, default), doc) for key, default, doc in config_help()]
    if not file.isatty():
        file.write("key\tdefault\trange\tmeaning\n")
        file.writelines("\t".join(row) + "\n" for row in rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="mirl config keys (override with key.sub=value)")
    for column in ("key", "default", "range", "meaning"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=file).print(table)
