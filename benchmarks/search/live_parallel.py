"""Parallel efficiency of a LIVE study (real trainings through `moetune submit`), 1 vs 2 at once.

The same 6-trial study (debug proxy, 60k tokens per trial, the quickstart knobs) runs three
ways on this machine: one trial at a time on one core, one trial at a time on two cores, and two
trials at once on one core each (the spec default). The random sampler with a fixed seed and no
pruning make the work identical in all three (same 6 recipes, all trained to the end), so the
wall times compare scheduling alone. Reported: the whole `moetune submit` command (Ray start,
trials, report) and the trial span (first trial start to last trial end, from the study's
storage).

    python benchmarks/search/live_parallel.py          # prints JSON; --write saves live.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VARIANTS = [("1 trial at a time, 1 core", 1, 1), ("1 trial at a time, 2 cores", 1, 2),
            ("2 trials at a time, 1 core each", 2, 1)]
SPEC = """
[study]
name = "{name}"
n_trials = 6
max_concurrent = {concurrent}
seed = 0
sampler = "random"

[model]
preset = "debug"

[budget]
tokens_per_trial = 60_000
eval_every_tokens = 15_000

[objectives]
val_loss = "minimize"
tokens_per_s = "maximize"

[pruning]
scheduler = "none"

[resources]
cpus_per_trial = {cpus}

[space.params.lr]
type = "float"
low = 3e-4
high = 2e-2
log = true

[space.params.warmup_fraction]
type = "float"
low = 0.0
high = 0.2

[space.params.batch_schedule]
type = "categorical"
choices = ["constant", "linear", "step"]

[space.params.bias_update_speed]
type = "float"
low = 1e-4
high = 1e-2
log = true

[space.fixed]
batch_start = 8
batch_end = 32
seq_len = 128
"""


def run_variant(label: str, concurrent: int, cpus: int, root: Path) -> dict:
    import optuna

    name = f"par-c{concurrent}-cpu{cpus}"
    spec = root / f"{name}.toml"
    spec.write_text(SPEC.format(name=name, concurrent=concurrent, cpus=cpus))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tuner", "submit", str(spec), "--root", str(root),
                    "--no-progress"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{root / name / 'study.db'}")
    trials = study.get_trials(deepcopy=False)
    span = (max(t.datetime_complete for t in trials)
            - min(t.datetime_start for t in trials)).total_seconds()
    return {"variant": label, "max_concurrent": concurrent, "cpus_per_trial": cpus,
            "command_wall_s": round(wall, 1), "trial_span_s": round(span, 1),
            "states": sorted({t.state.name for t in trials}), "n": len(trials),
            "lr": [round(t.params["lr"], 6) for t in trials]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true")
    a = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="moetune-parallel-"))
    rows = [run_variant(*v, root) for v in VARIANTS]
    out = {"what": "live study, real trainings (measured)", "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/search/live_parallel.py --write",
           "load_avg_at_end": os.getloadavg(), "cores": os.cpu_count(), "rows": rows}
    print(json.dumps(out, indent=1))
    if a.write:
        (HERE / "live.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
