"""The serve extra's install hint: one command for an installed mirl and a clone, in the errors, the README and
the docs; the error names what is installed instead. Runs without openenv (the setup that needs the hint)."""

import pytest

from mirl.cli import main


@pytest.mark.parametrize(
    ("found", "core", "named"),
    [
        (None, None, "(no openenv is installed)"),
        (
            None,
            "0.3.0",
            "(found openenv-core 0.3.0, which installs the same modules: pip uninstall openenv-core first)",
        ),
        ((0, 9), None, "(found openenv 0.9)"),
    ],
)
def test_an_openenv_older_than_0_10_is_one_line_that_names_what_is_installed(capsys, monkeypatch, found, core, named):
    import importlib.metadata

    from mirl.envs.remote import SERVE_EXTRA, server

    monkeypatch.setattr(server, "openenv_version", lambda: found)
    real = importlib.metadata.version

    def version(name):
        if name != "openenv-core":
            return real(name)
        if core is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return core

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert main(["serve-env", "bandit"]) == 2
    err = capsys.readouterr().err
    assert err == f"mirl serve-env: serving an env needs openenv 0.10: {SERVE_EXTRA} {named}\n"


def test_one_install_hint_for_the_serve_extra_in_the_readme_and_the_docs():
    """The README, the docs and the errors give the same command, right for an installed mirl and for a clone."""
    from pathlib import Path

    from mirl.envs.remote import SERVE_EXTRA

    root = Path(__file__).resolve().parents[2]
    for path in (root / "README.md", root / "docs" / "remote_envs.md", root / "docs" / "your-task.md"):
        text = " ".join(path.read_text().split())
        assert "[serve]" in text and text.count("[serve]") == 2 * text.count(SERVE_EXTRA), path.name
