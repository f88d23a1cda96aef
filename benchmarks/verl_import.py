"""What mirl's veRL plugin adds to ``import verl``: seconds and peak memory, with the plugin and without, in one run.

Run (in the veRL environment): ``.venv-verl/bin/python benchmarks/verl_import.py [--repeats 5]``.

Each sample is a fresh interpreter that times ``import verl`` alone (wall: ``time.perf_counter``; CPU:
``time.process_time``; interpreter start excluded) and reports its peak resident memory (``ru_maxrss``).
"without" runs with ``VERL_USE_EXTERNAL_PLUGINS=none`` (veRL loads no entry point), "with" with
``VERL_USE_EXTERNAL_PLUGINS=mirl`` (veRL loads mirl's ``verl.plugins`` entry point, as every driver, Ray worker and
vLLM server does). The variants alternate, so a busy machine slows all alike; the script prints medians.

Whole imports of veRL take tens of seconds on a busy 2-core machine and vary by more than the plugin costs, so a
third variant, "increment", measures the plugin's part directly: after ``import verl`` without plugins, the same
process does what veRL's ``__init__`` does with them (look up the ``verl.plugins`` entry points, load mirl's) and
times that. The target is an increment under 0.5 s.

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
from importlib.metadata import entry_points
wall, cpu = time.perf_counter(), time.process_time()
import verl
seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
increment = None
if sys.argv[1] == "increment":
    wall = time.perf_counter()
    [plugin] = [ep for ep in entry_points(group="verl.plugins") if ep.name == "mirl"]
    plugin.load()
    increment = time.perf_counter() - wall
for name in sys.argv[2:]:
    __import__(name)
mirl = sorted(m for m in sys.modules if m.startswith("mirl.integrations.verl."))
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "increment": increment, "mirl": mirl,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def sample(plugins: str, mode: str = "import", *imports: str) -> dict:
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS=plugins, PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, *imports], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmarks/verl_import.py: the probe failed ({plugins=}): {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per variant (default 5)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"without": [], "with": [], "increment": []}
    for _ in range(args.repeats):
        runs["without"].append(sample("none"))
        runs["with"].append(sample("mirl"))
        runs["increment"].append(sample("none", "increment"))
    median = {
        name: {key: statistics.median(r[key] for r in rs) for key in ("seconds", "cpu_seconds", "peak_mb")}
        for name, rs in runs.items()
    }
    print(f"import verl, median of {args.repeats} fresh processes each (alternating)")
    for name in ("without", "with"):
        m, spread = median[name], ", ".join(f"{r['seconds']:.1f}" for r in runs[name])
        print(
            f"  {name:8s} plugin: wall {m['seconds']:6.2f} s  CPU {m['cpu_seconds']:6.2f} s  peak "
            f"{m['peak_mb']:5.0f} MB   (wall samples: {spread} s)"
        )
    wall = median["with"]["seconds"] - median["without"]["seconds"]
    cpu = median["with"]["cpu_seconds"] - median["without"]["cpu_seconds"]
    memory = median["with"]["peak_mb"] - median["without"]["peak_mb"]
    print(
        f"  with - without: wall {wall:+.2f} s, CPU {cpu:+.2f} s, peak {memory:+.0f} MB; "
        f"mirl modules: {runs['with'][0]['mirl']}"
    )
    increments = sorted(r["increment"] for r in runs["increment"])
    print(
        f"  increment (entry-point lookup + mirl's plugin, after import verl): median "
        f"{statistics.median(increments) * 1000:.1f} ms, max {increments[-1] * 1000:.1f} ms (target < 500 ms)"
    )
    registries = sample("mirl", "import", "verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.v1")
    print(f"  after veRL's registries are imported too: mirl modules loaded: {registries['mirl']}")


if __name__ == "__main__":
    main()
