"""``mirl train --help-config``: every config key with the comment that documents it in ``mirl/config.py``."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields, is_dataclass

from mirl import config as config_module


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


def print_config_help() -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="mirl config keys (override with key.sub=value)")
    for column in ("key", "default", "meaning"):
        table.add_column(column, overflow="fold")
    for row in config_help():
        table.add_row(*row)
    Console().print(table)
