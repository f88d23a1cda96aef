"""Rollout throughput on the quickstart's shapes: mirl's sampler vs ``model.generate``, batched vs one episode at
a time, and with vs without prefix sharing, in one run.

Run: ``python benchmarks/rollout.py [--model smollm2-135m-instruct | tiny] [--turns 5] [--repeats 1]
[--sequential-episodes 4] [--threads T]``.

Shapes: ``configs/quickstart.yaml`` (4 prompts x 4 samples on FrozenLake, 64 new tokens a turn, temperature 0.7,
top-p 0.95, full history) with ``--turns`` turns. Every figure is sampled tokens per second of wall time, prefill
included; modes are interleaved repeat by repeat and the median is reported, so a busy machine slows all of them
alike.

1. **sampler vs model.generate**: the 16 first-turn contexts (4 distinct prompts, each 4 times) in one call of
   ``policy.generate`` (with group prefix sharing, and without) and of ``model.generate(do_sample=True)`` at the same
   batch, temperature, top-p and token budget.
2. **rollout**: ``run_episodes`` on the 4 x 4 episodes with prefix sharing (identical prompts prefilled once, each
   turn extends the previous turn's cache), without it (every turn re-encodes its whole context), and one episode
   at a time (``--sequential-episodes`` of them, one per group, each alone; the rate is what is compared).
   Exactness: the sampled tokens with and without sharing are compared (same seeds).

3. **context modes**: the same 4 x 4 rollout with ``rollout.context_mode`` full, window (2 turns) and memory
   (the current turn plus the env's recap), ``rollout.max_context_tokens=4096`` so full mode drops nothing. Per
   turn, the mean context length (tokens) of the episodes still playing; then all prompt tokens of the rollout,
   the tokens actually encoded (prefix sharing and, in full mode, the cache carried from turn to turn), sampled
   tokens per second, and the ratios of memory and window to full. Replies differ between modes (other
   contexts, other samples), so episode lengths differ too; the per-turn means compare like with like.

Where the time goes: seconds inside prefill (``HFPolicy._prefill``) vs the rest of ``generate`` (decoding), and
prompt tokens vs tokens actually encoded.

``--part sampler|rollout|context`` runs one section only (default: all three).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from mirl import load_config  # the public name, which the baseline revisions have too
from mirl.rollout import run_episodes
from mirl.trainer.specs import train_specs
from mirl.types import SamplingParams


class Probe:
    """Wraps ``policy._prefill`` and ``policy.generate`` to time them."""

    def __init__(self, policy) -> None:
        self.policy, self.prefill_s, self.generate_s = policy, 0.0, 0.0
        prefill, generate = policy._prefill, policy.generate

        def timed_prefill(*args):
            start = time.perf_counter()
            try:
                return prefill(*args)
            finally:
                self.prefill_s += time.perf_counter() - start

        def timed_generate(*args):
            start = time.perf_counter()
            try:
                return generate(*args)
            finally:
                self.generate_s += time.perf_counter() - start

        policy._prefill, policy.generate = timed_prefill, timed_generate

    def reset(self) -> dict[str, float]:
        tokens = dict(self.policy.prefill_tokens)
        out = {"prefill_s": self.prefill_s, "decode_s": self.generate_s - self.prefill_s, **tokens}
        self.prefill_s = self.generate_s = 0.0
        self.policy.prefill_tokens.update(prompt=0, encoded=0, padded=0)
        return out


def first_turn_contexts(policy, config) -> list[list[int]]:
    """The 16 first-turn contexts of the quickstart rollout (one turn, recorded, not timed)."""
    one = dataclasses.replace(config.rollout, max_turns=1, max_new_tokens=1)
    episodes = run_episodes(policy, train_specs(config, 1), config.rollout.group_size, one, sampling_seed=0)
    return [list(e.turns[0].context_ids) for e in episodes]


def hf_generate(policy, contexts, sampling: SamplingParams) -> int:
    """``model.generate`` on the left-padded contexts; returns the number of sampled tokens (up to eos)."""
    ids, mask, _ = policy._left_pad(contexts)
    torch.manual_seed(0)
    out = policy.model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=0,
        max_new_tokens=sampling.max_new_tokens,
        eos_token_id=sorted(policy.stop_token_ids),
        pad_token_id=policy.pad_token_id,
    )
    new = out[:, ids.shape[1] :]
    stop = torch.tensor(sorted(policy.stop_token_ids))
    ended = torch.isin(new, stop).int().cumsum(-1)  # tokens after the first stop id are padding
    return int(((ended == 0) | ((ended == 1) & torch.isin(new, stop))).sum())


def sampler_vs_generate(policy, config, repeats: int, probe: Probe) -> None:
    contexts = first_turn_contexts(policy, config)
    r = config.rollout
    sampling = SamplingParams(
        max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, stop=(), seed=1
    )

    def mirl(sharing: bool):
        policy.prefix_sharing = sharing
        gens = policy.generate(contexts, sampling)
        policy.prefix_sharing = True
        return sum(len(g.token_ids) for g in gens)

    modes = {
        "mirl, prefix sharing": lambda: mirl(True),
        "mirl, no sharing": lambda: mirl(False),
        "model.generate": lambda: hf_generate(policy, contexts, sampling),
    }
    rates = interleave(modes, repeats, probe)
    lengths = sorted(len(c) for c in contexts)
    print(
        f"\n1. sampler vs model.generate: {len(contexts)} first-turn contexts ({len(set(map(tuple, contexts)))} "
        f"distinct, {lengths[0]}-{lengths[-1]} tokens), <= {r.max_new_tokens} new tokens, batch {len(contexts)}"
    )
    report(rates)
    base = statistics.median(rates["model.generate"]["rate"])
    for name in ("mirl, prefix sharing", "mirl, no sharing"):
        print(f"   {name} / model.generate: {statistics.median(rates[name]['rate']) / base:.2f} x")


def rollouts(policy, config, repeats: int, sequential: int, probe: Probe) -> None:
    specs, K = train_specs(config, 1), config.rollout.group_size
    played = {}

    def batched(sharing: bool, label: str):
        policy.prefix_sharing = sharing
        episodes = run_episodes(policy, specs, K, config.rollout, sampling_seed=0)
        policy.prefix_sharing = True
        played[label] = episodes
        return sum(len(t.response_ids) for e in episodes for t in e.turns)

    def one_at_a_time():
        tokens = 0
        for p in range(min(sequential, len(specs))):  # sample 0 of the first groups, each alone
            episode = run_episodes(policy, [specs[p]], 1, config.rollout, sampling_seed=p)[0]
            tokens += sum(len(t.response_ids) for t in episode.turns)
        return tokens

    modes = {
        "batched, prefix sharing": lambda: batched(True, "shared"),
        "batched, no sharing": lambda: batched(False, "plain"),
        f"one episode at a time ({sequential})": one_at_a_time,
    }
    rates = interleave(modes, repeats, probe)
    print(
        f"\n2. rollout: {len(specs)} prompts x {K} samples, full history, <= {config.rollout.max_turns} turns, "
        f"<= {config.rollout.max_new_tokens} new tokens a turn"
    )
    report(rates)
    shared = statistics.median(rates["batched, prefix sharing"]["rate"])
    plain = statistics.median(rates["batched, no sharing"]["rate"])
    single = statistics.median(rates[f"one episode at a time ({sequential})"]["rate"])
    print(f"   batched (sharing) / one at a time: {shared / single:.2f} x")
    print(f"   batched (no sharing) / one at a time: {plain / single:.2f} x")
    print(f"   prefix sharing / no sharing: {shared / plain:.2f} x")
    same = all(
        [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
        for a, b in zip(played["shared"], played["plain"], strict=True)
    )
    worst = max(
        (
            abs(x - y)
            for a, b in zip(played["shared"], played["plain"], strict=True)
            if same
            for ta, tb in zip(a.turns, b.turns, strict=True)
            for x, y in zip(ta.response_logprobs, tb.response_logprobs, strict=True)
        ),
        default=0.0,
    )
    print(
        f"   exactness: sampled tokens identical with and without sharing: {same}; "
        f"largest log-prob difference {worst:.2e}"
    )


CONTEXT_MODES = {"full": {}, "window (2 turns)": {"context_window": 2}, "memory": {}}


def context_modes(policy, config, repeats: int, probe: Probe) -> None:
    specs, K = train_specs(config, 1), config.rollout.group_size
    played: dict[str, list] = {}

    def play(label: str):
        mode = label.split(" ")[0]
        rollout = dataclasses.replace(
            config.rollout, context_mode=mode, max_context_tokens=4096, **CONTEXT_MODES[label]
        )
        played[label] = run_episodes(policy, specs, K, rollout, sampling_seed=0)
        return sum(len(t.response_ids) for e in played[label] for t in e.turns)

    rates = interleave({label: (lambda label=label: play(label)) for label in CONTEXT_MODES}, repeats, probe)
    print(
        f"\n3. context modes: {len(specs)} prompts x {K} samples, <= {config.rollout.max_turns} turns, "
        f"<= {config.rollout.max_new_tokens} new tokens a turn, max_context_tokens 4096"
    )
    report(rates)
    prompts = {}
    for label, episodes in played.items():
        per_turn = [
            [len(e.turns[t].context_ids) for e in episodes if len(e.turns) > t] for t in range(config.rollout.max_turns)
        ]
        means = "  ".join(f"{statistics.mean(lengths):6.0f} ({len(lengths):2d})" for lengths in per_turn if lengths)
        prompts[label] = [statistics.mean(lengths) for lengths in per_turn if lengths]
        run = rates[label]["runs"][-1]
        print(f"   {label:18s} mean context tokens per turn (episodes): {means}")
        print(f"   {'':18s} prompt tokens {run['prompt']}, encoded {run['encoded']}")
    for label in ("memory", "window (2 turns)"):
        last = min(len(prompts[label]), len(prompts["full"])) - 1
        ratio = prompts[label][last] / prompts["full"][last]
        total = rates[label]["runs"][-1]["prompt"] / rates["full"]["runs"][-1]["prompt"]
        speed = statistics.median(rates[label]["rate"]) / statistics.median(rates["full"]["rate"])
        print(
            f"   {label} / full: mean context at turn {last + 1} {ratio:.2f} x, prompt tokens of the rollout "
            f"{total:.2f} x, tokens/s {speed:.2f} x"
        )


def interleave(modes: dict, repeats: int, probe: Probe) -> dict[str, dict]:
    """Run every mode once per repeat, in turn; collect tokens/s and the probe's breakdown of each run."""
    out = {name: {"rate": [], "runs": []} for name in modes}
    probe.reset()
    for _ in range(repeats):
        for name, fn in modes.items():
            start = time.perf_counter()
            tokens = fn()
            seconds = time.perf_counter() - start
            out[name]["rate"].append(tokens / seconds)
            out[name]["runs"].append({"tokens": tokens, "seconds": seconds, **probe.reset()})
    return out


def report(rates: dict) -> None:
    for name, result in rates.items():
        run = result["runs"][-1]
        breakdown = ""
        if run["prefill_s"] > 0:
            breakdown = (
                f"  prefill {run['prefill_s']:6.1f} s ({run['encoded']} of {run['prompt']} prompt tokens "
                f"encoded, {run['padded']} positions computed), decode {run['decode_s']:6.1f} s"
            )
        print(
            f"   {name:34s} {statistics.median(result['rate']):8.1f} tokens/s  ({run['tokens']} tokens in "
            f"{run['seconds']:.1f} s){breakdown}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model name, or 'tiny' for the test model")
    parser.add_argument("--turns", type=int, default=5, help="turns per episode at most")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (interleaved); medians are reported")
    parser.add_argument("--sequential-episodes", type=int, default=4, help="episodes timed one at a time")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--skip-generate", action="store_true", help="skip the model.generate comparison")
    parser.add_argument("--part", choices=("all", "sampler", "rollout", "context"), default="all", help="one section")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from mirl.policy import HFPolicy, tiny_policy

    config = load_config("configs/quickstart.yaml", [f"rollout.max_turns={args.turns}", "rollout.context_mode=full"])
    policy = tiny_policy() if args.model == "tiny" else HFPolicy.load(args.model, device="cpu")
    print(f"{args.model}: torch threads {torch.get_num_threads()}")
    probe = Probe(policy)
    if not args.skip_generate and args.part in ("all", "sampler"):
        sampler_vs_generate(policy, config, args.repeats, probe)
    if args.part in ("all", "rollout"):
        rollouts(policy, config, args.repeats, args.sequential_episodes, probe)
    if args.part in ("all", "context"):
        context_modes(policy, config, args.repeats, probe)


if __name__ == "__main__":
    main()
