"""reports.build on the studies that break reports: empty, failed-only, single, infeasible, ..."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest
from synthetic_studies import MEMORY_LIMIT, add, new_study, random_study

import reports
from reports.analysis.snapshot import take_snapshot
from reports.sections.fp8_gap import fp8_gaps
from tuner.study.store import records

ARTIFACTS = ("trials_csv", "trials_parquet", "ranked_md", "report_html")


def built(study: optuna.Study, tmp_path, **kw) -> tuple[dict, str, str, pd.DataFrame]:
    paths = reports.build(study, tmp_path / "out", **kw)
    for key in ARTIFACTS:
        assert paths[key].stat().st_size > 0, key
    md = paths["ranked_md"].read_text()
    html = paths["report_html"].read_text()
    return paths, md, html, pd.read_csv(paths["trials_csv"])


def test_only_failed_trials(tmp_path) -> None:
    study = new_study()
    add(study, state="fail", reason="out of memory")
    add(study, state="fail", reason="RuntimeError: CUDA error: device-side assert")
    paths, md, html, df = built(study, tmp_path)
    assert "No feasible trial" in md and "No feasible trial" in html
    assert "out of memory (1): #0" in md and "RuntimeError (1): #1" in md
    assert df["outcome"].tolist() == ["fail", "fail"] and df["pareto_rank"].isna().all()
    assert "pareto_png" not in paths  # nothing to plot, and no empty image pretending otherwise


def test_empty_study(tmp_path) -> None:
    _, md, _, df = built(new_study(), tmp_path)
    assert len(df) == 0 and "0 trial(s)" in md


def test_single_trial(tmp_path) -> None:
    study = new_study()
    add(study, values=[3.1, 1.5], constraints={"max_peak_memory_gb": 1.5 - MEMORY_LIMIT},
        memory_gb=1.5)
    paths, md, html, df = built(study, tmp_path)
    assert df.loc[0, "pareto_rank"] == 1 and df.loc[0, "feasible"]
    assert "| 1 | #0 | 3.1 | 1.5 |" in md
    assert "pareto_png" in paths and "curves_png" in paths


def test_infeasible_only(tmp_path) -> None:
    study = new_study()
    for mem in (5.0, 6.5):
        add(study, state="infeasible", values=[3.0, mem], memory_gb=mem,
            constraints={"max_peak_memory_gb": mem - MEMORY_LIMIT},
            reason=f"constraint max_peak_memory_gb: {mem} > {MEMORY_LIMIT}")
    _, md, html, df = built(study, tmp_path)
    assert not df["feasible"].any() and df["pareto_rank"].isna().all()
    assert "## Infeasible (2)" in md
    assert "constraint max_peak_memory_gb (2): #0 (5.0 > 4.0), #1 (6.5 > 4.0)" in md
    assert "infeasible" in html  # the points are still plotted, marked as such


def test_reasons_that_differ_only_in_numbers_are_one_group(tmp_path) -> None:
    study = new_study()
    for tokens in (77824, 75776, 77824):
        add(study, state="pruned", reason=f"pruned by ASHA at {tokens} tokens")
    _, md, _, _ = built(study, tmp_path)
    assert "- pruned by ASHA at N tokens (3): #0 (77824), #1 (75776), #2 (77824)" in md


def test_interrupted_trial_points_to_its_rerun(tmp_path) -> None:
    study = new_study()
    add(study, state="fail", reason="interrupted")
    add(study, values=[3.0, 1.0], constraints={"max_peak_memory_gb": -3.0})
    rerun = study.trials[1]
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE, values=[2.9, 1.0], params=rerun.params,
        distributions=rerun.distributions,
        user_attrs={**rerun.user_attrs, records.RERUN_OF: 0},
        system_attrs={"constraints:max_peak_memory_gb": -3.0}))
    _, md, _, df = built(study, tmp_path)
    assert df["rerun_of"].tolist()[2] == 0
    assert "- interrupted (1): #0 (re-run as #2)" in md


def test_infeasible_reason_derived_when_runner_left_none(tmp_path) -> None:
    study = new_study()
    add(study, state="infeasible", values=[3.0, 5.0], constraints={"max_peak_memory_gb": 1.0})
    df = reports.trials_frame(study)
    assert df.loc[0, "outcome"] == "infeasible"
    assert df.loc[0, "reason"] == "constraint max_peak_memory_gb: 1 > 0"


def test_single_objective_study_gets_ranked_list_and_convergence(tmp_path) -> None:
    study = new_study("single", objectives=[["val_loss", "minimize"]])
    for loss in (3.5, 3.0, 3.2, 2.9):
        add(study, values=[loss], val_loss=loss)
    paths, md, html, df = built(study, tmp_path)
    ranked = df.sort_values("pareto_rank")["number"].tolist()
    assert ranked == [3, 1, 2, 0]
    assert "## Best trial" in md and "Best `val_loss`: 2.9" in md
    assert "Convergence" in html and "hypervolume" not in md.lower()
    assert "progress_png" in paths and "pareto_png" not in paths


def test_three_objectives(tmp_path) -> None:
    study = new_study("three", objectives=[["val_loss", "minimize"],
                                           ["peak_memory_gb", "minimize"],
                                           ["tokens_per_s", "maximize"]])
    for v in ([3.0, 1.0, 100.0], [2.5, 2.0, 50.0], [3.5, 0.5, 80.0], [3.6, 2.5, 40.0]):
        add(study, values=v, constraints={"max_peak_memory_gb": -1.0})
    _, md, html, df = built(study, tmp_path)
    assert df["pareto_rank"].tolist() == [1, 1, 1, 2]
    assert html.count("class=\"plotly-graph-div\"") >= 3  # one front per objective pair


def test_running_study_report_says_it_is_a_snapshot(tmp_path) -> None:
    study = random_study(n=10)
    add(study, state="running")
    _, md, html, df = built(study, tmp_path)
    for text in (md, html):
        assert "Snapshot of a study still running" in text and "1 trial(s) not finished" in text
    assert df["outcome"].iloc[-1] == "running"


def test_finished_study_is_not_called_a_snapshot(tmp_path) -> None:
    _, md, html, _ = built(random_study(n=10), tmp_path)
    assert "still running" not in md and "still running" not in html


def test_snapshot_note_marks_the_report(tmp_path) -> None:
    _, md, _, _ = built(random_study(n=5), tmp_path, snapshot_note="Written after trial 4.")
    assert "Written after trial 4." in md


def test_parquet_and_csv_hold_the_same_table(tmp_path) -> None:
    paths, _, _, df = built(random_study(n=20), tmp_path)
    pq = pd.read_parquet(paths["trials_parquet"])
    assert list(pq.columns) == list(df.columns)
    pd.testing.assert_series_equal(pq["pareto_rank"].astype("Int64"),
                                   df["pareto_rank"].astype("Int64"))
    assert pq["param.lr"].tolist() == pytest.approx(df["param.lr"].tolist())


def test_frame_has_the_promised_columns() -> None:
    df = reports.trials_frame(random_study(n=20))
    for col in ("state", "param.lr", "param.precision", "objective.val_loss",
                "constraint.max_peak_memory_gb", "feasible", "pareto_rank", "reason",
                "duration_s", "tokens", "precision", "fp8_emulated", "seed", "max_vio_batch",
                "max_vio_val", "loss_spikes", "peak_memory_method"):
        assert col in df.columns, col
    fp8 = df[df["precision"] == "fp8"]
    assert fp8["fp8_emulated"].eq(True).all()


def test_measured_emulated_modeled_labels(tmp_path) -> None:
    study = new_study("labels", objectives=[["val_loss", "minimize"],
                                            ["full_gpu_hours", "minimize"]])
    add(study, values=[3.0, 1e5], params={"lr": 1e-3, "warmup_fraction": 0.1,
                                          "precision": "fp8"})
    add(study, values=[2.9, 2e5])
    _, md, html, _ = built(study, tmp_path)
    assert "`full_gpu_hours`: minimize (modeled" in md
    assert "fp8 numerics emulated on CPU" in md
    assert "precision=fp8 (emulated)" in md and "precision=fp8 (emulated)" in html
    assert "full_gpu_hours [modeled]" in html


def test_memory_objective_says_how_it_was_measured(tmp_path) -> None:
    study = random_study(n=10)
    _, md, html, _ = built(study, tmp_path)
    assert "`peak_memory_gb`: minimize (measured: exact byte count" in md
    assert "peak_memory_gb [measured: CPU byte count]" in html


def test_fp8_gap_of_a_matched_pair_and_the_bar(tmp_path) -> None:
    study = new_study()
    same = {"lr": 1e-3, "warmup_fraction": 0.05}
    add(study, values=[3.000, 1.0], val_loss=3.000, params={**same, "precision": "bf16"})
    add(study, values=[3.006, 1.0], val_loss=3.006, params={**same, "precision": "fp8"})
    add(study, values=[2.0, 1.0], val_loss=2.0,  # different recipe: must not be paired
        params={"lr": 5e-3, "warmup_fraction": 0.05, "precision": "bf16"})
    gaps = fp8_gaps(take_snapshot(study))
    assert [(g.fp8_trial, g.bf16_trial, g.matched) for g in gaps] == [(1, 0, True)]
    assert gaps[0].relative == pytest.approx(0.002) and gaps[0].within_bar
    _, md, _, _ = built(study, tmp_path)
    assert "| #1 | #0 | 3.006 | 3 | +0.200% | yes | same recipe | emulated |" in md


def test_fp8_gap_unmatched_is_labelled(tmp_path) -> None:
    study = new_study()
    add(study, values=[3.0, 1.0], val_loss=3.0,
        params={"lr": 1e-3, "warmup_fraction": 0.05, "precision": "bf16"})
    add(study, values=[3.3, 1.0], val_loss=3.3,
        params={"lr": 2e-3, "warmup_fraction": 0.05, "precision": "fp8"})
    (gap,) = fp8_gaps(take_snapshot(study))
    assert not gap.matched and gap.relative == pytest.approx(0.1)
    _, md, _, _ = built(study, tmp_path)
    assert "| +10.000% | n/a | best of each: recipes differ, not a precision effect |" in md


def test_importances_name_the_parameter_that_drives_the_loss() -> None:
    study = new_study()
    for i in range(30):
        lr = 10 ** (-4 + 2 * i / 29)
        loss = 3.0 + 4 * abs(math.log10(lr) + 3)  # only lr matters
        add(study, values=[loss, 1.0], val_loss=loss,
            params={"lr": lr, "warmup_fraction": (i * 7 % 30) / 150, "precision": "bf16"})
    imp = reports.analysis.importance.param_importances(take_snapshot(study))
    assert max(imp.values["val_loss"], key=imp.values["val_loss"].get) == "lr"


def test_top_table_lists_the_pareto_set_first() -> None:
    study = random_study(n=30)
    df = reports.trials_frame(study)
    lines = reports.top_table(df, 3).splitlines()
    assert lines[0].split()[:4] == ["rank", "trial", "val_loss", "peak_memory_gb"]
    assert len(lines) == 4 and all(line.split()[0] == "1" for line in lines[1:2])
    best = set(df.loc[df["pareto_rank"] == 1, "number"])
    assert int(lines[1].split()[1]) in best


def test_top_table_without_feasible_trials() -> None:
    study = new_study()
    add(study, state="fail", reason="out of memory")
    assert "no feasible trial yet" in reports.top_table(reports.trials_frame(study))


def test_wrong_reference_point_length_writes_nothing(tmp_path) -> None:
    with pytest.raises(ValueError, match="reference point: must have one value per objective"):
        reports.build(random_study(n=10), tmp_path / "out", reference_point=[1.0])
    assert not (tmp_path / "out").exists()


def test_hypervolume_and_its_reference_point_are_stated(tmp_path) -> None:
    paths, md, html, df = built(random_study(n=30), tmp_path, reference_point=[5.0, 7.0])
    feas = df[df["feasible"]]
    pts = feas[["objective.val_loss", "objective.peak_memory_gb"]].to_numpy()
    expected = reports.hypervolume(pts, [5.0, 7.0])
    ref = "reference point (val_loss = 5, peak_memory_gb = 7); given by the user"
    assert expected > 0 and f"{expected:.6g}, {ref}" in md
    assert f"<b>{expected:.6g}</b>, reference point (val_loss = 5, peak_memory_gb = 7)" in html


def _traceback_of(exc: BaseException) -> str:
    """A trial's recorded reason as the trainable keeps it: the traceback's tail."""
    import traceback
    try:
        raise exc
    except BaseException as e:  # noqa: BLE001 - turned into text, as the runner does
        return "".join(traceback.format_exception(e)).rstrip()


def test_traceback_failures_group_by_their_exception_line(tmp_path) -> None:
    study = new_study()
    add(study, state="fail", reason=_traceback_of(ValueError("Recipe.lr: must be > 0")))
    add(study, state="fail", reason=_traceback_of(ValueError("Recipe.lr: must be > 0")))
    add(study, state="fail", reason=_traceback_of(RuntimeError("shape mismatch (4, 8)")))
    _, md, _, _ = built(study, tmp_path)
    failed = md.split("## Failed (3)")[1].split("\n## ")[0]
    bullets = [x for x in failed.splitlines() if x.strip()]
    assert bullets == ["- ValueError (2): #0 (Recipe.lr: must be > 0), "
                       "#1 (Recipe.lr: must be > 0)",
                       "- RuntimeError (1): #2 (shape mismatch (4, 8))"]
    assert "Traceback" not in md and "File " not in md


@pytest.mark.parametrize(("key", "shown"), [("min_tokens_per_s", "tokens_per_s >= 1"),
                                            ("max_peak_memory_gb", "peak_memory_gb <= 4"),
                                            ("max_vio", "max_vio <= 2.2")])
def test_constraints_are_shown_with_the_side_the_runner_applies(tmp_path, key, shown) -> None:
    study = new_study()
    study.set_user_attr(records.CONSTRAINTS, {key: {"min_tokens_per_s": 1.0,
                                                    "max_peak_memory_gb": 4.0,
                                                    "max_vio": 2.2}[key]})
    add(study, values=[3.0, 1.0], constraints={key: -1.0})
    _, md, html, _ = built(study, tmp_path)
    assert f"- Constraint `{key}`: {shown}" in md
    assert "&lt;" not in md and "&gt;" not in md
    assert f"Constraint <code>{key}</code>: {shown.replace('>', '&gt;').replace('<', '&lt;')}" \
        in html


def test_markdown_text_keeps_comparisons_and_escapes_only_what_could_be_markup() -> None:
    from reports.sections.markdown import md_text
    assert md_text("constraint max_vio: 2.1 violates <= 2 & 5.0 > 4.0") == \
        "constraint max_vio: 2.1 violates <= 2 & 5.0 > 4.0"
    assert md_text("<b>x</b> &amp; <!-- c -->") == "&lt;b>x&lt;/b> &amp;amp; &lt;!-- c -->"
