import subprocess
import sys

import mirl


def test_help_and_version_run_without_heavy_imports():
    out = subprocess.run([sys.executable, "-m", "mirl.cli", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"mirl {mirl.__version__}"
    code = "import sys; from mirl.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # `mirl --help` stays instant


def test_help_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "mirl.cli", "--help"], capture_output=True, text=True, check=True)
    for command in ("train", "eval", "diagnose", "report", "compare", "envs", "play"):
        assert command in out.stdout


def test_every_command_help_has_a_description_line():
    """``mirl <command> --help`` says what the command does under its usage, not only its options."""
    from mirl.cli import build_parser

    parser = build_parser()
    missing = [name for name, sub in parser.commands.items() if not (sub.description or "").strip()]
    assert missing == []
