"""The numeric core (algorithms, filtering, diagnostics.info) imports torch and math only (DESIGN.md layers)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "mirl.algorithms",
        "mirl.filtering",
        "mirl.diagnostics.info",
        "mirl.diagnostics.null",
        "mirl.diagnostics.agnostic",
        "mirl.diagnostics.alarm",
        "mirl.diagnostics",
    ],
)
def test_core_imports_no_model_code_and_no_other_layer(module):
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('transformers', 'omegaconf', 'rich')]\n"
        "bad += [m for m in sys.modules if m.startswith('mirl.') and m.split('.')[1] not in "
        "('algorithms', 'filtering', 'diagnostics', 'version')]\n"  # version: the package's one constant
        "bad += [m for m in sys.modules if m.startswith('mirl.diagnostics.') and m not in "
        "('mirl.diagnostics.info', 'mirl.diagnostics.null', 'mirl.diagnostics.agnostic', 'mirl.diagnostics.alarm')]\n"
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imports(path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included), as dotted names;
    ``from mirl import x`` counts as importing ``mirl``."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _package_files():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "src" / "mirl"
    return {".".join(p.relative_to(root.parent).with_suffix("").parts): p for p in root.rglob("*.py")}


def test_no_module_inside_the_package_imports_the_package_itself():
    """``import mirl`` / ``from mirl import x`` inside mirl runs the package's __init__ for a name that has a module
    of its own (the version is in mirl.version); the layering reads from the modules it names."""
    offenders = sorted(name for name, path in _package_files().items() if "mirl" in _imports(path))
    assert offenders == []


def test_the_config_tree_its_files_and_its_checks_form_no_cycle():
    """mirl.config (the typed tree) imports neither the reader nor the checks; the checks do not import the reader;
    the reader (load_config) imports both."""
    files = _package_files()
    tree, reader, checks = (_imports(files[f"mirl.{name}"]) for name in ("config", "config_files", "config_checks"))
    assert not tree & {"mirl.config_files", "mirl.config_checks"}
    assert "mirl.config_files" not in checks
    assert {"mirl.config", "mirl.config_checks"} <= reader


def test_the_version_module_matches_pyproject():
    import tomllib
    from pathlib import Path

    from mirl.version import __version__

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert __version__ == pyproject["project"]["version"]


def test_the_metric_catalogue_sits_below_everything_that_reads_it():
    """The catalogue (every logged key) is read by the trainer, the diagnostics, the report and the integrations:
    it imports nothing of mirl's, and none of those layers reaches it through another layer's module."""
    files = _package_files()
    assert not {m for m in _imports(files["mirl.catalogue"]) if m.startswith("mirl")}
    readers = {name: _imports(path) for name, path in files.items() if "mirl.catalogue" in _imports(path)}
    layers = {name.split(".")[1] for name in readers}
    assert {"trainer", "report", "integrations"} <= layers  # diagnostics names its keys in docs only
    assert not [name for name, path in files.items() if "mirl.trainer.metrics" in _imports(path)]
