"""``mirl drift ROLLOUTS --model M``: would re-rendering these conversations change the contexts the model saw?

Reads the same files as ``mirl diagnose`` (mirl episodes, TRL's logged completions, veRL's dumps, chat, RAGEN,
prompt/completion JSONL) and checks them with the model's tokenizer only (no weights are loaded):
``mirl.diagnostics.drift`` has the three checks (chat template prefixes, text boundaries, sampled ids). Prints how
many conversations are affected and where the first ones part; ``--out FILE.json`` writes the whole report.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "drift",
        help="check saved conversations for retokenisation drift (chat template prefixes, sampled ids)",
        description="Check whether each saved conversation's contexts survive retokenisation: the chat template of "
        "the first k messages must encode to a prefix of the first k + 1, and sampled ids must re-encode to "
        "themselves; says where the sampled and trained contexts part.",
    )
    parser.add_argument(
        "rollouts",
        metavar="ROLLOUTS",
        help="a rollout file, or a directory as for mirl diagnose (its newest rollout file)",
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=("auto", "mirl", "chat", "verl", "trl", "ragen", "prompt-completion"),
        help="the file's format (default auto: told from its content)",
    )
    parser.add_argument("--model", required=True, help="the tokenizer's model: a hub id or a local directory")
    parser.add_argument("--show", type=int, default=3, help="partings printed in full (default 3)")
    parser.add_argument("--out", type=Path, help="write the report as JSON to this file")
    parser.set_defaults(func=run_drift)


def load_tokenizer(name: str):
    """The tokenizer of a directory holding one (a model's, or a tokenizer saved alone), else of a model name
    (``mirl.policy.sources.resolve_model``: hub id, built-in name)."""
    from transformers import AutoTokenizer

    from mirl.policy.sources import resolve_model

    if Path(name).is_dir() and (Path(name) / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(name)
    path, kwargs = resolve_model(name)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def run_drift(args: argparse.Namespace) -> int:
    from mirl.cli.diagnose import rollout_file
    from mirl.cli.paths import check_output_file
    from mirl.diagnostics.drift import drift_report
    from mirl.diagnostics.records import load_records
    from mirl.errors import UserError

    if args.show < 0:
        raise UserError(f"--show must be >= 0, got {args.show}")
    check_output_file(args.out)
    said = io.StringIO()
    with contextlib.redirect_stderr(said):  # diagnose's directory reader names its own command in what it says
        path = rollout_file(args.rollouts)
    sys.stderr.write(said.getvalue().replace("mirl diagnose: scoring", "mirl drift: reading"))
    fmt, records = load_records(path, args.format)  # a bad file fails before the tokenizer loads
    tokenizer = load_tokenizer(args.model)
    conversations = fmt != "mirl" and any(not isinstance(r.get("prompt", r.get("input", "")), str) for r in records)
    if conversations and not getattr(tokenizer, "chat_template", None):
        raise UserError(f"{args.model!r} has no chat template to render the conversations with; pass its chat model")
    report = {"rollouts": str(path), "model": args.model, **drift_report(fmt, records, tokenizer)}
    print_report(report, args.show)
    if args.out is not None:
        from mirl.safeio import atomic_write_text

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    return 0


def print_report(report: dict, show: int) -> None:
    checked = ", ".join(f"{n} {check} steps" for check, n in report["checked"].items()) or "nothing"
    print(
        f"mirl drift: {report['rollouts']} ({report['format']}, {report['conversations']} conversations, "
        f"{checked} checked with {report['model']}'s tokenizer)"
    )
    if not report["partings"]:
        print("no drift: every context re-renders to a prefix of the next one")
        return
    count = report["partings"]
    print(f"{report['affected']} of {report['conversations']} conversations part ({count} parting{'s' * (count != 1)})")
    for step, count in report["by_step"].items():
        print(f"  {step}: {count}")
    for parting in report["first_partings"][:show]:
        print(f"conversation {parting['conversation']}: {parting['where']}, token {parting['token']}")
        print(f"  sampled: {parting['sampled']}")
        print(f"  trained: {parting['trained']}")
    if report["partings"] > show:
        print(f"(--out FILE.json holds the first {len(report['first_partings'])})", file=sys.stderr)
