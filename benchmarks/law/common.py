"""What the law benchmarks share: the spec a seed runs, its study through ``moetune submit`` or
``resume``, its law data read back from the stored studies, and the cross-seed checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: the JSON files live here
ROOT = BENCH.parent


def spec_text(cfg: dict[str, Any], seed: int) -> str:
    """`search_spaces/law.toml` at a benchmark's sizes and ``seed`` (``cfg``: tokens, held_out,
    trials, noise_repeats, batches, precision): one batch in ``batches`` fixes batch_end, several
    search it; ``precision`` fixes the precision. law.toml's own grid (``[law] batches``) and
    held-out batch are dropped: these modes fix or search batch_end themselves."""
    text = (ROOT / "search_spaces" / "law.toml").read_text()
    out: list[str] = []
    skip = False
    written_below = {"batch_end", "batches", "held_out_batch", "held_out_batch_budget"} | (
        {"precision"} if cfg.get("precision") else set())
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if line.startswith("["):
            skip = line.startswith("[space.params.batch_end]")
        if skip or (key in written_below and not line.startswith("#")):
            continue
        if key == "name":
            line = f'name = "law-s{seed}"'
        elif key == "seed":
            line = f"seed = {seed}"
        elif key == "n_trials":
            line = f"n_trials = {cfg['trials']}"
        elif key == "noise_repeats":
            line = f"noise_repeats = {cfg['noise_repeats']}"
        elif key == "tokens" and line.startswith("tokens = ["):
            line = "tokens = [" + ", ".join(map(str, cfg["tokens"])) + "]"
        elif key == "held_out":
            line = f"held_out = {cfg['held_out']}"
        if line.startswith("[space.fixed]") and len(cfg["batches"]) > 1:
            out += ["[space.params.batch_end]", 'type = "categorical"',
                    "choices = [" + ", ".join(map(str, cfg["batches"])) + "]", ""]
        out.append(line)
        if line.startswith("[space.fixed]"):
            if len(cfg["batches"]) == 1:
                out.append(f"batch_end = {cfg['batches'][0]}")
            if cfg.get("precision"):
                out.append(f'precision = "{cfg["precision"]}"')
    return "\n".join(out) + "\n"


def db_path(root: Path, seed: int) -> Path:
    """Seed ``seed``'s study database under ``root`` (its study is ``law-s{seed}``)."""
    return root / "runs" / f"law-s{seed}" / "study.db"


def submit_or_resume(name: str, spec_path: Path | None, root: Path,
                     extra: tuple[str, ...] = ()) -> None:
    """``moetune submit spec_path`` under ``root``/runs, or ``moetune resume name`` when its
    study exists there (or no spec is given), one thread per trial; raises with the command's
    stderr when it fails."""
    if spec_path is None or (root / "runs" / name / "study.db").exists():
        cmd = [sys.executable, "-m", "tuner", "resume", name]
    else:
        cmd = [sys.executable, "-m", "tuner", "submit", str(spec_path)]
    cmd += ["--root", str(root / "runs"), "--no-progress", *extra]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def refit(seed: int, root: Path) -> dict[str, Any]:
    """One seed's law data recomputed from its stored studies (no trainings), with the spec
    file it was submitted from (``root``/law-s{seed}.toml)."""
    from reports.laws.law import law_data
    from tuner.study.specs.spec import load_spec

    spec = load_spec(root / f"law-s{seed}.toml")
    return law_data(spec, f"sqlite:///{root / 'runs' / spec.name / 'study.db'}")


def stored_law_data(seed: int, root: Path) -> dict[str, Any] | None:
    """One seed's law data with the spec its study stores (which may have gained a held-out
    budget since its .toml was written, `add_held_out`); None before the study exists."""
    import optuna

    from reports.laws.law import law_data
    from tuner.study.store import storage as st

    path = db_path(root, seed)
    if not path.exists():
        return None
    url = f"sqlite:///{path}"
    return law_data(st.stored_spec(optuna.load_study(study_name=f"law-s{seed}", storage=url)),
                    url)


def add_held_out(path: Path, name: str, tokens: int, trials: int = 0) -> None:
    """A study whose fitted budgets ran without a held-out budget gains one in its stored spec
    (``trials`` trials there when > 0: ``law.trials`` reaches only budgets not yet created), so
    ``moetune resume`` predicts it from the fitted budgets, stores the prediction, then runs it.
    Nothing when the stored spec has a held-out budget already."""
    import optuna

    from tuner.study.store import records

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    spec = dict(study.user_attrs[records.SPEC])
    if not spec["law"].get("held_out"):
        spec["law"] = {**spec["law"], "held_out": tokens} | ({"trials": trials} if trials else {})
        study.set_user_attr(records.SPEC, spec)


def pairs_inside(rows: list[tuple[float, list[float]]]) -> tuple[int, int]:
    """Across seeds (``rows``: each seed's prediction and band): how many (seed, other seed)
    pairs have the seed's prediction inside the other's band, out of how many pairs."""
    inside = sum(lo <= pred <= hi for i, (pred, _) in enumerate(rows)
                 for j, (_, (lo, hi)) in enumerate(rows) if i != j)
    return inside, len(rows) * (len(rows) - 1)


def within(ratio: float, factor: float) -> bool:
    """``ratio`` (predicted / measured) within ``factor`` either way."""
    return 1 / factor <= ratio <= factor


def g(v: Any, fmt: str = ".3g") -> str:
    """The law report's one number format ("—" for none)."""
    from reports.laws.law import num

    return num(v, fmt)


def read_json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")
