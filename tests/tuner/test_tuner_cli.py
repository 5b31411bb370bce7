"""The moetune CLI: bad input exits 2 and writes nothing; status/list/rerun read the storage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tuner.app.cli import COMMAND_MODULES, main
from tuner.study.specs.spec import load_spec
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "search_spaces" / "quickstart.toml"


def write_spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def test_module_entry_point_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "tuner", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for cmd in ("submit", "status", "list", "resume", "rerun"):
        assert cmd in out
    assert COMMAND_MODULES[0] == "tuner.app.commands"


@pytest.mark.parametrize(("text", "words"), [
    ('[study]\nname = "x"\nn_trials = 0\n[space.params.lr]\ntype = "float"\nlow = 0.1\n'
     'high = 0.2\n', ["study.n_trials", ">= 1", "0"]),
    ('[study]\nname = "x"\n[space]\nfile = "nope.toml"\n', ["space.file", "nope.toml"]),
    ('[study]\nname = "x"\ncolour = 1\n', ["unknown key", "colour", "n_trials"]),
    ("[study\n", ["not valid TOML"]),
])
def test_bad_spec_exits_2_naming_the_problem_and_writes_nothing(tmp_path, capsys, text, words):
    root = tmp_path / "runs"
    rc = main(["submit", str(write_spec(tmp_path, text)), "--root", str(root)])
    err = capsys.readouterr().err
    assert rc == 2
    for w in words:
        assert w in err
    assert not root.exists()


def test_bad_trainer_and_missing_spec_exit_2(tmp_path, capsys):
    root = tmp_path / "runs"
    assert main(["submit", str(QUICKSTART), "--root", str(root), "--trainer", "nope"]) == 2
    assert "MODULE:FUNCTION" in capsys.readouterr().err
    assert main(["submit", str(QUICKSTART), "--root", str(root),
                 "--trainer", "tuner.testing:no_such"]) == 2
    assert main(["submit", str(tmp_path / "none.toml"), "--root", str(root)]) == 2
    assert "existing file" in capsys.readouterr().err
    assert not root.exists()


@pytest.fixture
def stored_study(tmp_path):
    """A study with two finished trials, written through the storage API (no Ray)."""
    spec = load_spec(QUICKSTART, overrides={"study.name": "cli"})
    run_dir = tmp_path / "runs" / "cli"
    run_dir.mkdir(parents=True)
    study = st.create_study(spec, db.open_storage(db.storage_url(run_dir)), make_sampler(spec))
    for loss in (3.5, 3.2):
        t = study.ask()
        spec.space.suggest(t)
        t.set_user_attr(records.OUTCOME, "complete")
        study.tell(t, [loss, 1e4])
    t = study.ask()
    spec.space.suggest(t)
    t.set_user_attr(records.OUTCOME, "fail")
    t.set_user_attr(records.REASON, "Traceback...\nValueError: boom")
    study.tell(t, state=optuna.trial.TrialState.FAIL)
    return tmp_path / "runs", spec


def test_submit_refuses_an_existing_name_without_resume(stored_study, capsys):
    root, _ = stored_study
    assert main(["submit", str(QUICKSTART), "--name", "cli", "--root", str(root)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_submit_warns_about_a_load_dependent_objective(stored_study, tmp_path, capsys):
    root, _ = stored_study
    text = QUICKSTART.read_text().replace("[objectives]",
                                          '[objectives]\ntokens_per_s = "maximize"')
    spec = write_spec(tmp_path, text)
    # the warning comes first; this submit then stops (the study exists), before Ray
    assert main(["submit", str(spec), "--name", "cli", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "warning: objective tokens_per_s is each trial's own timing" in err
    assert "--resume" in err


def test_status_and_list(stored_study, capsys):
    root, spec = stored_study
    assert main(["list", "--root", str(root)]) == 0
    assert capsys.readouterr().out.split() == ["cli"]
    assert main(["status", "cli", "--root", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["#", "outcome", "val_loss", "full_gpu_hours"]
    # best first, the knee marked (one feasible front: #1 at 3.2 beats #0), then the rest
    assert out[1].split()[:4] == ["1", "complete", "knee", "3.2"]
    assert out[2].split()[:3] == ["0", "complete", "3.5"] and "ValueError: boom" in out[3]
    top = out[out.index("Top of the ranking:") + 1:]
    assert any("3.2" in line for line in top)  # the one complete trial heads the ranking
    assert main(["status", "--root", str(root)]) == 0
    summary = capsys.readouterr().out
    assert f"3/{spec.study.n_trials}" in summary and "val_loss=3.2 (#1)" in summary


def test_unknown_study_or_trial_exits_2(stored_study, capsys):
    root, _ = stored_study
    assert main(["status", "nope", "--root", str(root)]) == 2
    assert main(["resume", "nope", "--root", str(root)]) == 2
    assert "no study 'nope'" in capsys.readouterr().err
    assert main(["rerun", "cli", "99", "--root", str(root)]) == 2
    assert "no trial 99" in capsys.readouterr().err
    assert main(["rerun", "cli", "2", "--root", str(root)]) == 2  # failed before training
    assert "never started training" in capsys.readouterr().err
