"""What mirl's veRL plugin adds to ``import verl``: seconds and peak memory, with the plugin and without, in one run.

Run (in the veRL environment): ``.venv-verl/bin/python benchmarks/verl_import.py [--repeats 5]``.

Each sample is a fresh interpreter that times ``import verl`` alone (``time.perf_counter`` around the import,
interpreter start excluded) and reports its peak resident memory (``ru_maxrss``). "without" runs with
``VERL_USE_EXTERNAL_PLUGINS=none`` (veRL loads no entry point), "with" with ``VERL_USE_EXTERNAL_PLUGINS=mirl``
(veRL loads mirl's ``verl.plugins`` entry point, as every driver, Ray worker and vLLM server does). The two
alternate, so a busy machine slows both alike; the script prints the median of each, their difference and ratio.
The target is a difference under 0.5 s.

A last sample imports veRL's agent-loop registry and v1 trainers after ``import verl`` (what mirl's registration
waits for) and prints which mirl modules each process holds, to show where mirl's cost moved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import json, resource, sys, time
start = time.perf_counter()
import verl
seconds = time.perf_counter() - start
for name in sys.argv[1:]:
    __import__(name)
mirl = sorted(m for m in sys.modules if m.startswith("mirl.integrations.verl."))
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "mirl": mirl}))
"""


def sample(plugins: str, *imports: str) -> dict:
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS=plugins, PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", PROBE, *imports], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks/verl_import.py: the probe failed ({plugins=}): {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per variant (default 5)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"without": [], "with": []}
    for _ in range(args.repeats):
        runs["without"].append(sample("none"))
        runs["with"].append(sample("mirl"))
    seconds = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    memory = {name: statistics.median(r["peak_mb"] for r in rs) for name, rs in runs.items()}
    print(f"import verl, median of {args.repeats} fresh processes each (alternating)")
    for name in runs:
        spread = ", ".join(f"{r['seconds']:.2f}" for r in runs[name])
        print(f"  {name:8s} plugin: {seconds[name]:6.2f} s  peak {memory[name]:6.0f} MB   (samples: {spread} s)")
    print(f"  plugin adds {seconds['with'] - seconds['without']:+.2f} s ({seconds['with'] / seconds['without']:.3f}x)"
          f" and {memory['with'] - memory['without']:+.0f} MB; mirl modules loaded: {runs['with'][0]['mirl']}")
    registries = sample("mirl", "verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.v1")
    print(f"  after veRL's registries are imported too: mirl modules loaded: {registries['mirl']}")


if __name__ == "__main__":
    main()
