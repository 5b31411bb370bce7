"""The real proxy (debug preset, a tiny token budget) through `moetune submit`, then `rerun`."""

from __future__ import annotations

import json
import math

import optuna
import pytest

from tuner.app.cli import main
from tuner.study.store import records
from tuner.study.store.database import storage_url

SPEC = """
[study]
name = "e2e"
n_trials = 2
max_concurrent = 2
[model]
preset = "debug"
[budget]
tokens_per_trial = 8_192
eval_every_tokens = 4_096
[objectives]
val_loss = "minimize"
peak_memory_gb = "minimize"
[constraints]
max_peak_memory_gb = 4.0
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-3
high = 1e-2
log = true
[space.fixed]
batch_start = 4
batch_end = 8
seq_len = 64
"""


def test_submit_real_proxy_then_rerun_a_trial(ray_session, tmp_path, capsys):
    spec = tmp_path / "e2e.toml"
    spec.write_text(SPEC)
    root = tmp_path / "runs"
    assert main(["submit", str(spec), "--root", str(root), "--no-progress"]) == 0
    assert "study e2e: 2/2 trials done" in capsys.readouterr().out
    run_dir = root / "e2e"
    assert (run_dir / "study.db").is_file() and (run_dir / "ray").is_dir()
    assert json.loads((run_dir / "spec.json").read_text())["study"]["name"] == "e2e"
    study = optuna.load_study(study_name="e2e", storage=storage_url(run_dir))
    for t in study.trials:
        assert t.user_attrs[records.OUTCOME] == "complete", t.user_attrs.get(records.REASON)
        m = t.user_attrs[records.METRICS]
        assert m["tokens_trained"] <= 8_192 and m["peak_memory_method"] == "cpu_accounting"
        assert 0 < t.values[0] < math.log(256) + 1
        assert t.values[1] == pytest.approx(m["peak_memory_bytes"] / 2**30)
        assert len(t.user_attrs[records.CORPUS_HASH]) == 64  # sha256 of the stdlib corpus

    assert main(["rerun", "e2e", "0", "--root", str(root)]) == 0
    printed = capsys.readouterr()
    out = json.loads((run_dir / "rerun-0.json").read_text())
    assert out["same_corpus"] is True and out["torch_threads"] == 1
    # Same recipe, model, seed, corpus, budget and thread count: the same loss, bit for bit.
    assert out["rerun_val_loss"] == out["stored_val_loss"]
    assert "identical to the stored value" in printed.out
    # every metric both runs measured is compared, and the load-dependent ones say so
    assert out["metrics"]["val_loss"]["stored"] == out["metrics"]["val_loss"]["rerun"]
    assert {"tokens_per_s", "max_vio_val", "peak_memory_bytes", "steps"} <= set(out["metrics"])
    assert "  steps: stored" in printed.out and ", identical" in printed.out
    assert "tokens_per_s: stored" in printed.out and "measures the machine's load" in printed.out
    started = "moetune rerun: trial 0: started, 8,192 tokens, 1 torch thread(s) as the trial had"
    assert started in printed.err
    assert "moetune rerun: trial 0: 8,192/8,192 tokens, val_loss" in printed.err
