"""One decode step with a copying key/value cache (``torch.cat`` per step) vs append layers (``mirl.policy.kv``).

    python benchmarks/decode.py                       # SmolLM2-135M, 16 rows, 500 cached positions, 2 threads
    python benchmarks/decode.py --rows 1 --cached 300

Both caches are prefilled with the same random prompt; then each decodes ``--steps`` steps at a time, the two
taking turns for ``--rounds`` rounds, and the median time per step of each is printed with their ratio. The
outputs of the last step are compared (the same numbers: only where the keys and values are stored differs).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from mirl.policy import HFPolicy
from mirl.policy.kv import appendable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--cached", type=int, default=500, help="prompt positions in the cache before decoding")
    parser.add_argument("--steps", type=int, default=16, help="decode steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = HFPolicy.load(args.model, device="cpu")
    model = policy.model.eval()
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, model.config.vocab_size, (args.rows, args.cached), generator=generator)
    token = torch.randint(100, model.config.vocab_size, (args.rows, 1), generator=generator)
    caches = {}
    with torch.no_grad():
        for name in ("copying", "append"):
            cache = DynamicCache(config=model.config)
            model.model(input_ids=prompt, past_key_values=cache, use_cache=True)
            caches[name] = appendable(cache) if name == "append" else cache

        def step(cache) -> torch.Tensor:
            position = torch.full((args.rows, 1), cache.get_seq_length())
            hidden = model.model(input_ids=token, past_key_values=cache, use_cache=True, position_ids=position)
            return model.lm_head(hidden.last_hidden_state[:, -1])  # (rows, V)

        times = {name: [] for name in caches}
        last = {}
        for _ in range(args.rounds):
            for name, cache in caches.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    last[name] = step(cache)
                times[name].append((time.perf_counter() - start) / args.steps)
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    print(f"{args.model}: {args.rows} rows, {args.cached} cached positions, {args.rounds} rounds of {args.steps} steps")
    for name, ms in medians.items():
        print(f"  {name:8s} {ms:7.1f} ms per decode step")
    print(f"append / copying: {medians['append'] / medians['copying']:.3f}")
    print(f"largest logit difference at the last step: {(last['append'] - last['copying']).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
