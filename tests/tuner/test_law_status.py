"""A law's state from the command line: `moetune status` lists every budget with its state,
a budget's own name finds the law's storage without --storage, and an export of an unfinished
law says to resume it. The studies are written through the storage API (no Ray)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.app.cli import main
from tuner.app.export_command import unfinished_hint
from tuner.app.status import study_summary_rows
from tuner.study.specs.spec import load_spec
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler
from tuner.study.workflows.law import budget_spec

LAW_TOML = Path(__file__).resolve().parents[2] / "search_spaces" / "law.toml"


def _trials(study, spec, losses):
    for loss in losses:
        t = study.ask()
        spec.space.suggest(t)
        t.set_user_attr(records.OUTCOME, "complete")
        t.set_user_attr(records.METRICS, {"val_loss": loss})  # as a real trial records it
        study.tell(t, [loss])


@pytest.fixture
def law_root(tmp_path):
    return law_storage(tmp_path / "runs")


def law_storage(root: Path) -> Path:
    """law.toml with 2 trials per budget under ``root``: budgets 1-2 done, 3-4 not started, and
    the held-out budget interrupted after 1 of its 3 trials (a gap no real law leaves: every
    state shows). Returns ``root``."""
    spec = load_spec(LAW_TOML, overrides={"study.n_trials": 2, "study.sampler": "random",
                                          "law.batches": [], "law.held_out_batch": 0})  # no grid
    (root / "law").mkdir(parents=True)
    store = db.open_storage(db.storage_url(root / "law"))
    for i, losses in ((0, [3.1, 3.0]), (1, [2.9, 2.8]), (4, [2.5])):
        bspec = budget_spec(spec, i, predicted={"lr": 2e-3, "lr_band": [1e-3, 4e-3]} if i == 4
                            else None, point={"lr": 2e-3} if i == 4 else None)
        _trials(st.create_study(bspec, store, make_sampler(bspec)), bspec, losses)
    return root


def test_status_lists_every_budget_with_its_state(law_root, capsys):
    assert main(["status", "law", "--root", str(law_root)]) == 0
    out = capsys.readouterr().out
    rows = out[out.index("Budgets of the law:"):].splitlines()[2:]
    assert [r.split()[:3] for r in rows] == [
        ["1/5", "16384", "complete"], ["2/5", "49152", "complete"],
        ["3/5", "147456", "not"], ["4/5", "524288", "not"],
        ["5/5", "2621440", "interrupted"]]
    assert "law.t2621440" in rows[4] and "1/3" in rows[4]
    assert [r.split()[-1] for r in rows] == ["fitted"] * 4 + ["out"]  # the last: "held out"
    assert rows[4].endswith("held out")


def test_a_budget_is_found_by_its_name_without_storage(law_root, capsys):
    assert main(["status", "law.t2621440", "--root", str(law_root)]) == 0
    out = capsys.readouterr().out
    assert "2.5" in out and "Budgets of the law:" in out
    assert not (law_root / "law.t2621440").exists()  # looking wrote nothing
    assert main(["status", "law.t999", "--root", str(law_root)]) == 2
    assert "no study named 'law.t999'" in capsys.readouterr().err


def test_export_of_an_unfinished_law_says_to_resume_it(law_root, capsys):
    rc = main(["export", "law", "--root", str(law_root), "--target", "deepseek-v3-671b",
               "--hardware", "h800", "--gpus", "2048", "--tokens", "14.8e12"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("moetune export: error: ")
    assert err.count("`moetune resume law` goes on") == 1
    # what is appended to an export error that does not say it already
    held = st.load_study("law.t2621440", db.open_existing_storage(
        db.storage_url(law_root / "law")))
    hint = unfinished_hint(held)
    assert "budget 3/5 not started" in hint and "`moetune resume law` goes on" in hint


def test_law_md_says_an_interrupted_held_out_budget_with_its_prediction(law_root):
    from reports.laws.law import law_data, law_markdown

    spec = load_spec(LAW_TOML, overrides={"study.n_trials": 2, "study.sampler": "random",
                                          "law.batches": [], "law.held_out_batch": 0})  # no grid
    md = law_markdown(law_data(spec, db.storage_url(law_root / "law")))
    held = md[md.index("## Held-out budget"):]
    assert "Not run yet" not in held
    assert "Interrupted before its search ended (1 trial with a result" in held
    assert "predicted before it ran: lr 0.002 [0.001–0.004]" in held
    assert "`moetune resume law` finishes it" in held


def test_report_with_out_keeps_the_law_report_inside_it(law_root, tmp_path, capsys):
    """`moetune report LAW --out DIR` writes the law's report into DIR/law, never beside DIR
    (where another study's could be), and budget 0's page links the figure there; without
    --out it sits beside the study's own report, as the law run writes it."""
    out = tmp_path / "mine" / "q1"
    assert main(["report", "law", "--root", str(law_root), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert str(out / "law" / "law.md") in said
    assert said.splitlines()[-1].startswith("law law: ")  # the answer, in one line, last
    assert (out / "law" / "law.md").is_file() and (out / "ranked.md").is_file()
    assert [p.name for p in out.parent.iterdir()] == ["q1"]  # nothing written beside it
    assert "<img src='law/law.png'" in (out / "report.html").read_text()
    assert "(law/law.md, law/law.png)" in (out / "ranked.md").read_text()
    assert main(["report", "law", "--root", str(law_root)]) == 0
    assert (law_root / "law" / "law" / "law.md").is_file()
    assert "<img src='../law/law.png'" in (law_root / "law" / "report" / "report.html").read_text()


def test_each_budget_of_the_shipped_law_says_what_it_is_to_the_law():
    from tuner.app.status import _role

    law = load_spec(LAW_TOML).law
    roles = [_role(law, i) for i in range(len(law.budgets))]
    assert roles == ["fitted"] * len(law.tokens) + [
        "held out", f"held-out batch (batch_end {law.held_out_batch})"]


def test_an_interrupted_trial_reads_as_interrupted_not_as_a_failure(law_root, capsys):
    """A trial a stopped driver left (re-run by `moetune resume`) is no failure of its recipe:
    status says `interrupted`, in the trials' table and the studies' summary."""
    from optuna.trial import TrialState

    from tuner.study.run.resume import INTERRUPTED

    study = optuna.load_study(study_name="law.t2621440",
                              storage=db.storage_url(law_root / "law"))
    t = study.ask()
    t.set_user_attr(records.REASON, INTERRUPTED)
    study.tell(t, state=TrialState.FAIL)
    assert main(["status", "law.t2621440", "--root", str(law_root)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:1] == [str(t.number)])
    assert row.split()[1] == "interrupted" and " fail " not in f" {row} "
    summary = study_summary_rows([study])[0]
    assert summary["interrupted"] == 1 and summary["fail"] == 0
