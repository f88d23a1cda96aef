"""``mirl diagnose ROLLOUTS.jsonl --model M``: is the reasoning in saved rollouts still input-dependent?

Reads mirl episode records, or what other frameworks write (veRL's rollout dumps, TRL's logged completions,
RAGEN's JSONL export, chat JSONL, prompt/completion JSONL; ``docs/diagnose.md``), cross-scores (X, Z) pairs with
the model, and prints per scope the MI family (per-token ``est``: MI-Est against its bound log N, MI-ZScore, and
the per-sequence MI-Est), retrieval@k against chance, H(Z|X), H(Z) and the regime. ``--out FILE.json`` writes
the same numbers, plus every catalogue key, as JSON. The generator of the pair samplers is seeded with
``--seed``, so a diagnosis is reproducible.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

SCOPE_CHOICES = ("first_turn", "trajectory", "turn_position", "all")
DEFAULT_SCOPES = ("first_turn", "trajectory")
ITERATION_FILE = re.compile(r"iteration_(\d+)\.jsonl")  # the rollout files of a run (trainer/run.py)
VERL_STEP_FILE = re.compile(r"(\d+)\.jsonl")  # veRL's trainer.rollout_data_dir: one <step>.jsonl per step
TRL_COMPLETIONS_FILE = re.compile(r"completions_(\d+)\.parquet")  # TRL: <output_dir>/completions/
MAX_PAIRS = 100_000  # rows scored per scope; far beyond any rollout file, far below what exhausts memory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="score saved rollouts: MI proxies, retrieval vs chance, H(Z|X), H(Z), regime",
        description="Cross-score the (prompt, reasoning) pairs of saved rollouts (mirl's, veRL's, TRL's, RAGEN's, "
        "chat or prompt/completion JSONL) with a model and print, per scope, whether the reasoning still depends on "
        "its input: MI-Est, retrieval against chance, H(Z|X), H(Z) and the regime. See docs/diagnose.md.",
    )
    parser.add_argument(
        "rollouts",
        metavar="ROLLOUTS.jsonl",
        help="a rollout file (mirl, veRL, TRL, RAGEN, chat, prompt/completion); a directory (a mirl run or its "
        "rollouts/, veRL's rollout_data_dir, TRL's output_dir or its completions/) means its newest file",
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=("auto", "mirl", "chat", "verl", "trl", "ragen", "prompt-completion"),
        help="the file's format (default auto: told from its content)",
    )
    parser.add_argument(
        "--fields",
        metavar="FIELD=KEY,...",
        help="read any prompt/completion log (JSONL, parquet or CSV) whose keys have other names, e.g. "
        "prompt=query,completion=response,group=prompt_id,reward=reward (fields: prompt, completion, group, "
        "reward, success, step; a key may be a dotted path such as metadata.group_id)",
    )
    parser.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="scorer: smollm2-135m-instruct (offline default), a hub id, a local directory, a .gguf file, "
        "a run directory (its newest checkpoint) or RUN/checkpoints/iteration_N",
    )
    parser.add_argument(
        "--scope",
        action="append",
        choices=SCOPE_CHOICES,
        help="repeatable; default first_turn and trajectory (the paper's), or a run's own; all = those and "
        "turn_position",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        help="(X, Z) pairs per scope, at most 100000 (default 64, or a run's own diagnostics.num_pairs)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the pair samplers (default 0)")
    parser.add_argument("--mode", choices=("shared", "naive"), default="shared", help="prefix-shared or naive scoring")
    parser.add_argument("--action-dependence", action="store_true", help="also score Z -> answer and X -> answer")
    parser.add_argument(
        "--reasoning",
        choices=("closed", "open"),
        help="Z is the text inside <think>...</think> (closed, the default) or also an unclosed <think> (open); "
        "default a run's own diagnostics.reasoning",
    )
    parser.add_argument(
        "--reasoning-regex",
        metavar="PATTERN",
        help="Z is capture group 1 of the first match in each reply, for other tag conventions, e.g. "
        "'<reasoning>(.*?)</reasoning>' (DOTALL); replaces --reasoning",
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON to this file")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", help="auto (float32 on CPU), float32, bfloat16, float16")
    parser.add_argument("--max-batch-tokens", type=int, default=8192, help="tokens per scoring forward pass")
    parser.set_defaults(func=run_diagnose)


def scopes_of(choices: list[str] | None) -> list[str]:
    """``--scope`` values -> scope names, in a fixed order.

    >>> scopes_of(None), scopes_of(["all"]), scopes_of(["trajectory", "first_turn"])
    (['first_turn', 'trajectory'], ['first_turn', 'trajectory', 'turn_position'], ['first_turn', 'trajectory'])
    """
    chosen = set(choices or DEFAULT_SCOPES)
    if "all" in chosen:
        chosen = set(SCOPE_CHOICES[:-1])
    return [scope for scope in SCOPE_CHOICES[:-1] if scope in chosen]


def rollout_file(path: str | Path) -> Path:
    """``path`` itself, or for a directory its newest rollout file (said on stderr): a mirl run or its
    ``rollouts/`` (``iteration_000001.jsonl``, ...), veRL's ``rollout_data_dir`` (``<step>.jsonl``), TRL's
    ``output_dir`` or its ``completions/`` (``completions_N.parquet``). Links are not followed into these folders
    (``os.scandir`` sees them as links), and ``load_records(..., below=path)`` opens the chosen file without
    following any."""
    from mirl.errors import UserError

    path = Path(path)
    if not path.is_dir():
        return path
    places = [(path / "rollouts", ITERATION_FILE), (path, ITERATION_FILE), (path, VERL_STEP_FILE)]
    places += [(path / "completions", TRL_COMPLETIONS_FILE), (path, TRL_COMPLETIONS_FILE)]
    for folder, pattern in places:
        if folder.is_symlink() or not folder.is_dir():
            continue
        with os.scandir(folder) as entries:
            numbered = [
                (int(match.group(1)), entry.name)
                for entry in entries
                if (match := pattern.fullmatch(entry.name)) and entry.is_file(follow_symlinks=False)
            ]
        if numbered:
            newest = max(numbered)[1]
            print(
                f"mirl diagnose: scoring {folder / newest}, the newest of {len(numbered)} rollout files",
                file=sys.stderr,
            )
            return folder / newest
    raise UserError(
        f"{str(path)!r} is a directory without rollout files (mirl's iteration_000001.jsonl, veRL's <step>.jsonl, "
        "TRL's completions_N.parquet); pass a rollout file"
    )


def run_settings(rollouts: Path, args: argparse.Namespace) -> None:
    """Fill the pairs, scopes and reasoning rule the user left unset: from the ``config.yaml`` of the run the file
    belongs to (``RUN/rollouts/iteration_000001.jsonl``), so a run is diagnosed as it was in training (said on stderr),
    else the diagnostics' defaults."""
    from mirl.config import DiagnosticsConfig

    config_file = rollouts.parent.parent / "config.yaml"
    run = None
    unset = args.pairs is None or args.scope is None or args.reasoning is None
    if unset and rollouts.parent.name == "rollouts" and config_file.is_file() and not config_file.is_symlink():
        from mirl.config_files import load_config
        from mirl.errors import UserError

        try:
            run = load_config(config_file, saved=True).diagnostics
        except (UserError, ValueError) as error:
            print(f"mirl diagnose: not using {config_file} ({error}); the defaults instead", file=sys.stderr)
        except RecursionError:  # a hostile config nested thousands deep, wherever the parser gave up
            print(f"mirl diagnose: not using {config_file} (nested too deeply); the defaults instead", file=sys.stderr)
    if run is None:
        defaults = DiagnosticsConfig()
        args.pairs = defaults.num_pairs if args.pairs is None else args.pairs
        args.reasoning = args.reasoning or defaults.reasoning
        return
    taken = []
    if args.pairs is None:
        args.pairs = run.num_pairs
        taken.append(f"{args.pairs} pairs")
    if args.scope is None:
        args.scope = [scope for scope in run.scopes if scope in SCOPE_CHOICES]
        taken.append("scopes " + ", ".join(args.scope))
    if args.reasoning is None:
        args.reasoning = run.reasoning
        taken.append(f"reasoning {args.reasoning}")
    print(f"mirl diagnose: {', '.join(taken)} from {config_file}, as in training", file=sys.stderr)


def run_diagnose(args: argparse.Namespace) -> int:
    """Check the arguments and read the whole rollout file first, then load the model and score."""
    from mirl.cli.paths import check_output_file
    from mirl.diagnostics.records import load_records
    from mirl.errors import UserError

    for flag, value in (("--pairs", args.pairs), ("--max-batch-tokens", args.max_batch_tokens)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    if args.pairs is not None and args.pairs > MAX_PAIRS:  # each pair is a sampled row; the paper uses 64
        raise UserError(f"--pairs must be at most {MAX_PAIRS}, got {args.pairs}; e.g. --pairs 256")
    check_output_file(args.out)
    regex = None
    if args.reasoning_regex is not None:
        from mirl.diagnostics.reasoning import ReasoningRegex

        if args.reasoning is not None:
            raise UserError("--reasoning and --reasoning-regex both say what Z is; pass one of them")
        regex = ReasoningRegex.compile(args.reasoning_regex)
        args.reasoning = "closed"  # the regex's spans are final: nothing is re-read as open
    fields = None
    if args.fields is not None:
        from mirl.diagnostics.formats import parse_fields

        try:
            fields = parse_fields(args.fields)
        except ValueError as error:
            raise UserError(str(error)) from None
    below = Path(args.rollouts) if Path(args.rollouts).is_dir() else None  # a file chosen in it: no links below
    args.rollouts = rollout_file(args.rollouts)
    run_settings(Path(args.rollouts), args)
    # a bad file fails here, before a model is loaded
    fmt, records = load_records(args.rollouts, args.format, fields=fields, below=below)
    from mirl.cli.threads import fit_threads

    if note := fit_threads():  # fewer torch threads when other work holds some of the cores, said on stderr
        print(f"mirl diagnose: {note}", file=sys.stderr)
    policy = load_policy(args.model, device=args.device, dtype=args.dtype, max_batch_tokens=args.max_batch_tokens)
    report = diagnose_records(
        args.rollouts,
        fmt,
        records,
        policy,
        scopes=scopes_of(args.scope),
        num_pairs=args.pairs,
        seed=args.seed,
        mode=args.mode,
        action_dependence=args.action_dependence,
        reasoning=args.reasoning,
        regex=regex,
    )
    report["model"] = args.model
    print_report(report)
    if report["hint"]:  # after the table, where a reader of "pairs 0" looks
        print(f"mirl diagnose: {report['hint']}", file=sys.stderr)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from mirl.safeio import atomic_write_text

        atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    return 0


def _image_loader(path, policy):
    """A vision policy reads the images of a rollout file from ``images/`` beside it (``mirl.rollout.io``)."""
    from pathlib import Path

    from mirl.rollout.io import IMAGES_DIR, image_loader

    process = getattr(policy, "process", None)
    return image_loader(Path(path).parent / IMAGES_DIR, process) if process is not None else None


def load_policy(model: str, *, device: str, dtype: str, max_batch_tokens: int):
    """The scorer, in eval mode: a model name, or a run / checkpoint directory (``mirl.cli.models``)."""
    from mirl.cli.models import load_named_policy

    return load_named_policy(model, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens)


def diagnose_records(
    path, fmt: str, records, policy, *, scopes, num_pairs, seed, mode, action_dependence, reasoning="closed", regex=None
) -> dict:
    """Diagnose checked records (``load_records``) with ``policy``; the JSON-ready report (without the model).
    ``regex``: a :class:`~mirl.diagnostics.reasoning.ReasoningRegex` that finds Z instead of the tags."""
    from mirl.cli.progress import work_bar
    from mirl.diagnostics.offline import diagnose, episodes_from_records, summary_rows
    from mirl.rollout.prompts import EXAMPLE_REASONINGS

    load_image = _image_loader(path, policy)
    episodes = episodes_from_records(fmt, records, policy.tokenizer, path=path, load_image=load_image, regex=regex)
    if regex is not None and regex.budget.skipped:  # a reply past its time share: skipped, counted and named
        print(f"mirl diagnose: {regex.budget.note()}", file=sys.stderr)
    note = input_note(fmt, records, episodes)
    print(f"mirl diagnose: {note}", file=sys.stderr)
    plan = f"scoring {{total:,}} tokens ({mode} mode; {len(episodes)} episodes, up to {num_pairs} pairs per scope)"
    with work_bar("scoring", "tokens", plan) as progress:
        metrics = diagnose(
            policy,
            episodes,
            scopes=scopes,
            num_pairs=num_pairs,
            seed=seed,
            mode=mode,
            action_dependence=action_dependence,
            reasoning=reasoning,
            progress=progress,
            format_reasoning=EXAMPLE_REASONINGS,  # copies of them are no reasoning, as in training
        )
    return {
        "rollouts": str(path),
        "format": fmt,
        "tokens": "exact" if fmt == "mirl" else "re-tokenised",
        "input": note,
        "reasoning": f"regex {regex.pattern}" if regex is not None else reasoning,
        "episodes": len(episodes),
        "scopes": list(scopes),
        "pairs": num_pairs,
        "seed": seed,
        "mode": mode,
        "summary": summary_rows(metrics),
        "metrics": metrics,
        "hint": reasoning_hint(episodes, reasoning, regex),
    }


def reasoning_hint(episodes, reasoning: str, regex) -> str | None:
    """When most replies hold no reasoning span under the closed rule (untagged completions, or tags never
    closed), the options that would find one; None otherwise."""
    if reasoning != "closed" or regex is not None:
        return None
    turns = [turn for episode in episodes for turn in episode.turns]
    missing = sum(not turn.reasoning_ids for turn in turns)
    if not turns or 2 * missing <= len(turns):
        return None
    return (
        f"{missing} of {len(turns)} replies hold no closed <think>...</think> span, so they have no reasoning to "
        "score; --reasoning open also reads a reply that never closes the tag (its text up to <answer>), and "
        "--reasoning-regex PATTERN reads another convention, e.g. '<reasoning>(.*?)</reasoning>'"
    )


def input_note(fmt: str, records, episodes) -> str:
    """What was read and how it became tokens, in one sentence for stderr and the report."""
    from mirl.diagnostics.formats import FORMATS, group_source

    groups = len({episode.group for episode in episodes})
    if fmt == "mirl":
        return f"{len(episodes)} mirl episodes in {groups} groups, scored on their exact sampled token ids"
    spec = FORMATS[fmt]
    template = (
        " and chat template" if any(not isinstance(r.get("prompt", r.get("input")), str) for r in records) else ""
    )
    caveat = f"; {spec.caveat}" if spec.caveat else ""
    return (
        f"{len(episodes)} trajectories of {spec.described}, in {groups} groups from {group_source(fmt, records)}; "
        f"the text is re-tokenised with the scoring model's tokenizer{template}, so X and Z are not the exact "
        f"sampled ids{caveat}"
    )


ROWS = (
    ("pairs M", "pairs", "{:.0f}"),
    ("columns N", "columns", "{:.0f}"),
    ("empty Z skipped", "empty_reasoning", "{:.0f}"),
    ("MI-Est", "mi_estimate", "{:.3f}"),
    ("  bound log N", "mi_upper_bound", "{:.3f}"),
    ("MI contrast (null-corrected)", "mi_contrast", "{:.3f}"),
    ("  95% interval", "mi_contrast_interval", "{0[0]:.3f} to {0[1]:.3f}"),
    ("MI-ZScore", "mi_zscore", "{:.3f}"),
    ("MI-Est per sequence", "mi_estimate_seq", "{:.3f}"),
    ("retrieval@1", "retrieval@1", "{:.1%}"),
    ("  chance@1", "chance@1", "{:.1%}"),
    ("  above chance, corrected", "retrieval_above_chance_corrected", "{:.1%}"),
    ("  95% interval", "retrieval_above_chance_corrected_interval", "{0[0]:.1%} to {0[1]:.1%}"),
    ("retrieval@4", "retrieval@4", "{:.1%}"),
    ("  chance@4", "chance@4", "{:.1%}"),
    ("H(Z|X)", "conditional_entropy", "{:.3f}"),
    ("H(Z)", "reasoning_entropy", "{:.3f}"),
    ("agnostic share", "agnostic_share", "{:.2f}"),
    ("  95% interval", "agnostic_share_interval", "{0[0]:.2f} to {0[1]:.2f}"),
    ("grounded share (env)", "grounded_share", "{:.2f}"),
    ("template share (env)", "template_share", "{:.2f}"),
    ("malformed replies", "invalid_frac", "{:.1%}"),
    ("regime", "regime", "{}"),
    ("MI-Est Z -> answer", "za_mi_estimate", "{:.3f}"),
    ("MI-Est X -> answer", "xa_mi_estimate", "{:.3f}"),
)


def print_report(report: dict) -> None:
    """A rich table with one column per scope and one row per number (``ROWS``)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a pipe or a file: no terminal width to respect, keep every cell on one line
        console = Console(width=max(console.width, 24 + 22 * len(report["summary"])))
    table = Table(
        title=f"mirl diagnose: {report['rollouts']} ({report['episodes']} episodes, {report['mode']} scoring)"
    )
    table.add_column("per token, nats")
    for row in report["summary"]:
        table.add_column(row["scope"], justify="right")
    for label, key, fmt in ROWS:
        if not any(key in row for row in report["summary"]):
            continue
        table.add_row(label, *(fmt.format(row[key]) if key in row else "-" for row in report["summary"]))
    console.print(table)
    if report.get("tokens") == "re-tokenised":
        console.print(f"input: {report['input']}")
    console.print("chance@k = min(1, k x share of columns holding the row's own prompt)")
    if any("agnostic_share" in row for row in report["summary"]):
        console.print(
            "agnostic share: the estimated share of reasonings whose own score row shows no input dependence (one "
            "batch: no trend, no alarm); a regime 'degenerate' means most replies are malformed, not template collapse"
        )
    if any("mi_contrast" in row for row in report["summary"]):
        console.print(
            "MI contrast: MI-Est minus its mean under shuffled attributions (a test of input dependence, not an MI "
            "estimate: no log N bound); intervals from the shuffles' quantiles"
        )
