"""ranked.md and report.html mark the trials whose val_loss is within the measured noise of the
best as tied, and the front members within the noise of the knee as tied with it."""

from __future__ import annotations

from synthetic_studies import add, new_study

import reports
from reports.sections.recommend import recommend
from tuner.export.pick import Pick, pick_trial
from tuner.study.store import records


def ranked_md(study, tmp_path) -> str:
    return reports.build(study, tmp_path)["ranked_md"].read_text()


def rows_of(md: str) -> dict[str, str]:
    """trial label ('#3') -> its table row."""
    return {line.split("|")[2].strip(): line for line in md.splitlines()
            if line.startswith("| ") and "#" in line.split("|")[2]}


def test_trials_within_the_noise_of_the_best_are_marked_tied(tmp_path):
    study = new_study(objectives=[["val_loss", "minimize"]])
    for loss in (2.50, 2.00, 2.015, 2.10):
        add(study, values=[loss], params={"lr": 1e-3 * loss, "warmup_fraction": 0.05,
                                          "precision": "bf16"})
    study.set_user_attr(records.NOISE, {"sd": 0.02, "n": 6, "how": "2 recipe(s) x 3 seeds"})
    md = ranked_md(study, tmp_path / "a")
    rows = rows_of(md)
    assert rows["#1"].rstrip(" |").endswith("best")
    assert "**tied** (+0.015)" in rows["#2"]
    assert "tied" not in rows["#3"] and "tied" not in rows["#0"]
    assert "within the measured run-to-run noise (±0.02)" in md


def test_without_a_noise_measurement_nothing_is_called_tied(tmp_path):
    study = new_study(objectives=[["val_loss", "minimize"]])
    for loss in (2.00, 2.001):
        add(study, values=[loss], params={"lr": 1e-3 * loss, "warmup_fraction": 0.05,
                                          "precision": "bf16"})
    md = ranked_md(study, tmp_path)
    assert "| #1 |" in md and "**tied**" not in md and "| tied |" not in md
    assert ("Whether other feasible trials are tied with the best trial #0 cannot be judged: "
            "run-to-run noise was not measured") in md


# -- the knee, with noise ----------------------------------------------------------------------

# (val_loss, peak_memory_gb): #0..#3 form the front, #4 is dominated. The knee is #1; #0 is
# 0.01 from it in val_loss, #3 is 0.11 from it.
FRONT = [(2.00, 2.0), (2.01, 1.5), (2.5, 1.0), (1.9, 3.0), (3.0, 3.5)]


def front_study(sd: float | None):
    study = new_study(name="front")
    for i, (loss, mem) in enumerate(FRONT):
        add(study, values=[loss, mem], memory_gb=mem, trained=True,
            constraints={"max_peak_memory_gb": mem - 4.0},
            params={"lr": 1e-3 * (1 + i), "warmup_fraction": 0.01 * i, "precision": "bf16"})
    if sd is not None:
        study.set_user_attr(records.NOISE, {"sd": sd, "n": 6, "how": "2 recipe(s) x 3 seeds",
                                            "trials": [3, 0]})
    return study


def test_a_front_member_within_the_noise_is_shown_tied_with_the_knee(tmp_path):
    study = front_study(sd=0.02)  # #0 differs from the knee by 0.01 < 0.02
    paths = reports.build(study, tmp_path)
    md, html = paths["ranked_md"].read_text(), paths["report_html"].read_text()
    rows = rows_of(md)
    assert "| **knee** |" in rows["#1"]
    assert "| **tied** with knee |" in rows["#0"]
    assert all("with knee" not in rows[n] for n in ("#1", "#2", "#3", "#4"))
    said = ("Within the measured run-to-run noise (±0.02 on val_loss), the knee #1 is tied "
            "with #0: the data cannot order them; the pick stays #1")
    assert said in md and "peak_memory_gb has no noise estimate and was not judged" in md
    assert md.count(said) == 1  # in the recommendation only
    assert "<td><b>tied</b> with knee</td>" in html and "<td><b>knee</b></td>" in html
    assert said.replace("'", "&#x27;") in html
    assert "tied with the knee (within the noise)" in html  # the ring on the Pareto plot
    df = reports.trials_frame(study)
    assert df.loc[df["tied_knee"].fillna(False).astype(bool), "number"].tolist() == [0]
    picked = pick_trial(study, Pick(kind="knee"))
    assert picked.record.number == 1  # the pick stays the knee, the same trial everywhere
    assert "the knee #1 is tied with #0" in picked.how


def test_front_members_far_outside_the_noise_are_not_tied(tmp_path):
    study = front_study(sd=0.002)  # #0 is 0.01 away: five times the noise
    paths = reports.build(study, tmp_path)
    md, html = paths["ranked_md"].read_text(), paths["report_html"].read_text()
    assert "with knee" not in md and "tied</b> with knee" not in html
    said = ("None of the other feasible trials is within the measured run-to-run noise "
            "(±0.002 on val_loss) of the knee #1")
    assert said in md and said in html
    assert "tied with the knee (within the noise)" not in html
    df = reports.trials_frame(study)
    assert not df["tied_knee"].fillna(False).astype(bool).any()
    assert "none of the other feasible trials" in pick_trial(study, Pick(kind="knee")).how


def test_noise_the_spec_asks_for_reads_as_still_to_come_not_as_never_asked(tmp_path):
    """A study whose spec sets noise_repeats, its re-trainings not run yet (the page while the
    trials run, or a study stopped before them), is not told to set what it sets."""
    study = front_study(sd=None)
    study.set_user_attr(records.SPEC, {"study": {"noise_repeats": 2}})
    md = reports.build(study, tmp_path)["ranked_md"].read_text()
    assert ("tied with the knee #1 cannot be judged yet: the spec sets `noise_repeats = 2`, "
            "and run-to-run noise is measured by those re-trainings") in md
    assert "Run-to-run noise is not measured yet: the spec's `noise_repeats = 2`" in md
    assert "set `noise_repeats = 2` in [study]" not in md and "was not measured" not in md


def test_without_noise_ties_with_the_knee_cannot_be_judged(tmp_path):
    study = front_study(sd=None)
    paths = reports.build(study, tmp_path)
    md, html = paths["ranked_md"].read_text(), paths["report_html"].read_text()
    said = ("Whether other feasible trials are tied with the knee #1 cannot be judged: "
            "run-to-run noise was not measured (set `noise_repeats = 2` in [study]")
    assert said in md and "with knee" not in md
    assert "tied with the knee #1 cannot be judged" in html  # its markup: <code>, no backticks
    assert reports.trials_frame(study)["tied_knee"].isna().all()
    assert "cannot be judged" in pick_trial(study, Pick(kind="knee")).how
    assert "noise_repeats" in recommend(reports.take_snapshot(study)).ties


def test_the_service_study_page_carries_the_same_ties():
    """The service's study data (what its page draws) names the trials tied with the knee, by the
    rule ranked.md uses, with the reports' sentence; no ties are claimed without noise."""
    from tuner.app.requests import studies

    data = studies.detail(front_study(sd=0.02))
    assert data["knee"] == 1 and data["knee_ties"]["knee"] == 1
    assert data["knee_ties"]["tied"] == [0] and data["knee_ties"]["judged"]
    assert "the knee #1 is tied with #0" in data["knee_ties"]["sentence"]
    far = studies.detail(front_study(sd=0.001))["knee_ties"]
    assert far["tied"] == [] and far["judged"]
    unmeasured = studies.detail(front_study(sd=None))["knee_ties"]
    assert unmeasured["tied"] == [] and not unmeasured["judged"]
    assert "noise was not measured" in unmeasured["sentence"]


def test_a_trial_the_knee_dominates_within_the_noise_is_tied_and_its_knobs_left_open(tmp_path):
    """A front of one trial: #1 has the knee's memory and a val_loss 0.01 above it, under the
    noise (0.02): tied, and the warmup it differs in is named as undetermined; #2 is far."""
    study = new_study(name="alone")
    for loss, warmup, mem in ((2.00, 0.18, 1.0), (2.01, 0.02, 1.0), (2.5, 0.18, 1.5)):
        add(study, values=[loss, mem], memory_gb=mem, trained=True,
            constraints={"max_peak_memory_gb": mem - 4.0},
            params={"lr": 2e-3, "warmup_fraction": warmup, "precision": "bf16"})
    study.set_user_attr(records.NOISE, {"sd": 0.02, "n": 6, "how": "2 recipe(s) x 3 seeds",
                                        "trials": [0, 1]})
    rec = recommend(reports.take_snapshot(study))
    assert rec.trial == 0 and rec.tied == (1,)
    assert "the knee #0 is tied with #1" in rec.ties and "None of the" not in rec.ties
    assert ("the data do not determine warmup_fraction (the knee 0.18; #1 0.02)" in rec.ties)
    assert "lr" not in rec.ties.split("do not determine")[1]  # the same lr: not left open
    md = ranked_md(study, tmp_path)
    assert "| **tied** with knee |" in rows_of(md)["#1"]


def test_the_export_line_carries_the_tie_sentence_without_a_doubled_stop(tmp_path):
    from tuner.app.requests.actions import ExportRequest, export

    request = ExportRequest.from_options("front", {
        "pick": "knee", "target": "deepseek-v3-671b", "hardware": "h800", "gpus": 2048,
        "tokens": 14.8e12})
    done = export(front_study(sd=0.02), request, run_dir=tmp_path, storage="")
    line = next(m for m in done.messages("native") if m.startswith("trial 1: "))
    assert "the knee #1 is tied with #0" in line and ".;" not in line
