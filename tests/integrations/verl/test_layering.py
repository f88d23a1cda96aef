"""``mirl.integrations`` sits on top: no module below it (everything except ``integrations/`` and the CLI) imports
it, so the native trainer never needs veRL. Static: reads the import statements, imports nothing."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "mirl"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_lower_layer_imports_the_integrations():
    lower = [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in ("integrations", "cli")]
    assert len(lower) > 20
    offenders = {
        str(p.relative_to(SRC)): sorted(m for m in imported_modules(p) if m.startswith("mirl.integrations"))
        for p in lower
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import(tmp_path):
    file = tmp_path / "m.py"
    file.write_text("def f():\n    from mirl.integrations.verl import data\n")
    assert "mirl.integrations.verl" in imported_modules(file)
