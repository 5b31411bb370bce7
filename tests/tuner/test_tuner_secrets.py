"""A database password never leaves memory: a study run with a known password in its storage URL
is searched for it everywhere it could have been written."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.tuner.conftest import CANARY
from trainers import ModelArgs
from tuner.study.specs.spec import spec_from_dict
from tuner.study.store import database as db
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler
from tuner.study.trial.searcher import StudySearcher

SPEC = {
    "study": {"name": "secret", "n_trials": 3, "max_concurrent": 2},
    "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
    "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}},
}


def test_the_searcher_pickles_without_its_study(tmp_path):
    """Ray Tune pickles the search algorithm into tuner.pkl; the study (whose engine holds the
    URL) must not go with it."""
    spec = spec_from_dict(SPEC)
    store = db.open_storage(db.storage_url(tmp_path))
    study = st.create_study(spec, store, make_sampler(spec))
    searcher = StudySearcher(study=study, spec=spec, model_args=ModelArgs(), n_to_run=3)
    blob = pickle.dumps(searcher)
    assert str(tmp_path).encode() not in blob
    assert pickle.loads(blob)._study is None


def _files_holding(root: Path, secret: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if secret in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


def test_a_password_in_the_url_is_written_nowhere(private_postgres, tmp_path):
    import psycopg2

    spec = tmp_path / "secret.toml"
    spec.write_text('[study]\nname = "secret"\nn_trials = 3\nmax_concurrent = 2\n'
                    '[budget]\ntokens_per_trial = 300\neval_every_tokens = 100\n'
                    '[space.params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n')
    root = tmp_path / "runs"
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    url = private_postgres.url
    outputs = []
    for args in (["submit", str(spec), "--storage", url, "--no-progress"],
                 ["status", "secret", "--storage", url],
                 ["list", "--storage", url],
                 ["report", "secret", "--storage", url],
                 # a failing command prints the URL: masked there too
                 ["status", "secret", "--storage", url.replace("/postgres", "/nodb")]):
        done = subprocess.run([sys.executable, "-m", "tuner", *args, "--root", str(root)],
                              capture_output=True, text=True, timeout=600, env=env)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == (2 if "nodb" in args[-1] else 0), done.stderr[-2000:]
    assert all(CANARY not in out for out in outputs)
    assert "***" in outputs[0] and "***" in outputs[-1]  # the URL was shown, masked
    assert (root / "secret" / "ray").is_dir() and list((root / "secret").rglob("tuner.pkl"))
    assert _files_holding(root, CANARY.encode()) == []
    assert _files_holding(ray_tmp, CANARY.encode()) == []
    with psycopg2.connect(url) as con, con.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = 'public'")
        tables = [t for (t,) in cur.fetchall()]
        assert "study_user_attributes" in tables and "moetune_leases" in tables
        for table in tables:
            cur.execute(f'SELECT * FROM "{table}"')
            assert CANARY not in repr(cur.fetchall()), table
