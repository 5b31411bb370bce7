"""The report opens with what to run: the knee in words, what the alternatives trade, how sure
the study can be, what to check, and the export command."""

from __future__ import annotations

import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from synthetic_studies import add, new_study, random_study

import reports
from reports.sections.recommend import markdown, recommend
from tuner.export.pick import Pick, pick_trial
from tuner.study.results.diagnostics import next_range


def test_the_recommendation_is_the_knee_with_its_trade_offs(tmp_path):
    study = random_study(n=30, seed=1, trained=True)
    rec = recommend(reports.take_snapshot(study))
    assert rec is not None and not rec.single
    assert rec.trial == pick_trial(study, Pick(kind="knee")).record.number
    front = reports.trials_frame(study).query("pareto_rank == 1")
    assert len(rec.alternatives) == min(4, len(front) - 1)
    assert all(("better" in a) and ("worse" in a) for a in rec.alternatives)  # a real trade
    assert rec.command.startswith("moetune export random --pick knee --target ")
    md = (reports.build(study, tmp_path)["ranked_md"]).read_text()
    assert md.index("## Recommendation") < md.index("## Summary")
    assert f"**Run trial #{rec.trial}**" in md and "Run-to-run noise was not measured" in md
    html = (tmp_path / "report.html").read_text()
    assert f"Run trial #{rec.trial}</b>" in html


def test_both_reports_open_with_the_recommendation_in_their_own_markup(tmp_path):
    study = random_study(n=30, seed=1, trained=True)
    paths = reports.build(study, tmp_path)
    md, html = paths["ranked_md"].read_text(), paths["report_html"].read_text()
    body = html[html.index("<body>"):]
    heads = [body.index(h) for h in ("<h2>Recommendation</h2>", "<h2>Summary</h2>",
                                     "<h2>Top of the ranking</h2>")]
    assert heads == sorted(heads)  # the recommendation first, then the summary and the table
    first_section = md.index("## ")
    assert md[first_section:].startswith("## Recommendation")
    recommendation = body[heads[0]:heads[1]]
    assert "`" not in recommendation and "<code>" in recommendation  # no raw Markdown marks
    for text in (md, body):  # real names in every command, no placeholder
        assert "STUDY" not in text and "moetune validate random --top 5" in text


def test_warnings_name_an_edge_value_an_unvaried_knob_and_a_load_dependent_objective():
    objectives = [["val_loss", "minimize"], ["tokens_per_s", "maximize"]]
    study = new_study(objectives=objectives)
    for lr, loss, speed in ((9.9e-3, 2.0, 10.0), (1e-3, 2.5, 12.0), (3e-4, 3.0, 9.0)):
        add(study, values=[loss, speed], trained=True,
            params={"lr": lr, "warmup_fraction": 0.05, "precision": "bf16"})
    rec = recommend(reports.take_snapshot(study))
    text = " ".join(rec.warnings)
    assert "lr = 0.0099 sits at the top of [0.0001, 0.01]" in text
    assert "tune again with lr in [0.0001, 0.1] (the top moved out by half its log width)" in text
    assert "warmup_fraction never varied" in text and "precision never varied" in text
    assert "objective tokens_per_s is each trial's own timing" in text


def test_one_objective_recommends_the_best_trial_and_no_trial_says_so():
    study = new_study(objectives=[["val_loss", "minimize"]])
    assert markdown(recommend(reports.take_snapshot(study)))[-1].startswith("No feasible")
    for loss in (3.0, 2.2, 2.6):
        add(study, values=[loss], trained=True,
            params={"lr": 1e-3 * loss, "warmup_fraction": 0.05, "precision": "bf16"})
    rec = recommend(reports.take_snapshot(study))
    assert rec.single and rec.values == {"val_loss": 2.2} and "--pick best-loss" in rec.command
    assert "the one `--pick best-loss` exports" in "\n".join(markdown(rec))


def test_the_knee_with_the_worst_max_vio_is_flagged():
    study = new_study(name="vio")
    for i, (loss, mem, vio) in enumerate(((2.0, 2.0, 0.4), (2.01, 1.5, 2.76), (2.5, 1.0, 0.3),
                                          (1.9, 3.0, 0.5))):
        add(study, values=[loss, mem], memory_gb=mem, trained=True, max_vio_batch=vio,
            constraints={"max_peak_memory_gb": mem - 4.0},
            params={"lr": 1e-3 * (1 + i), "warmup_fraction": 0.05, "precision": "bf16"})
    rec = recommend(reports.take_snapshot(study))
    assert rec.trial == 1
    said = [w for w in rec.warnings if "MaxVio" in w]
    assert said == ["#1 has the highest MaxVio (per batch) of the 4 feasible trials: 2.76 "
                    "(median of the others 0.4): its experts' load is the least balanced; read "
                    "bias_update_speed and the MaxVio plot before carrying it to the full run."]


def test_a_knee_without_the_worst_max_vio_is_not_flagged():
    study = random_study(n=12, seed=2, trained=True)  # every trial the same MaxVio
    rec = recommend(reports.take_snapshot(study))
    assert not any("MaxVio" in w for w in rec.warnings)


@pytest.mark.parametrize("name, dist, side, expected", [
    ("lr", FloatDistribution(3e-4, 6e-2, log=True), "top", (3e-4, 0.8485)),
    ("bias_update_speed", FloatDistribution(1e-4, 1e-2, log=True), "bottom", (1e-5, 1e-2)),
    ("warmup_fraction", FloatDistribution(0.0, 0.5), "top", (0.0, 0.75)),
    # 1.2 and 1.0 break the recipe's rule (warmup_fraction < 1): pulled back halfway to 0.9
    ("warmup_fraction", FloatDistribution(0.0, 0.8), "top", (0.0, 0.9)),
    ("batch_end", IntDistribution(4, 64), "top", (4, 94)),
    ("warmup_fraction", FloatDistribution(0.0, 0.5), "bottom", None),  # 0 is its limit
])
def test_the_next_range_moves_the_edge_out_by_half_its_width_within_the_recipes_rules(
        name, dist, side, expected):
    got = next_range(name, dist, side)
    assert got == (None if expected is None else pytest.approx(expected, rel=1e-3))


def test_an_edge_at_the_knobs_limit_is_said_so_not_widened():
    study = new_study(objectives=[["val_loss", "minimize"]])
    for warmup, loss in ((0.0, 2.0), (0.1, 2.5), (0.15, 3.0)):
        add(study, values=[loss], trained=True,
            params={"lr": 1e-3 * (1 + warmup), "warmup_fraction": warmup, "precision": "bf16"})
    text = " ".join(recommend(reports.take_snapshot(study)).warnings)
    assert "0 is already the limit of warmup_fraction" in text and "[-" not in text


def test_a_recommended_curve_that_rose_before_falling_is_remarked():
    study = new_study(objectives=[["val_loss", "minimize"]])
    rising = [[50_000, 2.95], [100_000, 2.79], [150_000, 2.92], [200_000, 2.46]]
    add(study, values=[2.46], trained=True, curve=rising)
    add(study, values=[2.60], trained=True)  # 5.0, 4.6, ... a steady fall: no remark
    text = " ".join(recommend(reports.take_snapshot(study)).warnings)
    assert ("#0's val_loss rose from 2.790 at 100,000 tokens to 2.920 at 150,000 before "
            "falling to 2.460: a rise beyond 2% of the loss") in text


def test_a_steady_or_noise_sized_curve_is_not_remarked():
    study = new_study(objectives=[["val_loss", "minimize"]])
    add(study, values=[2.46], trained=True,
        curve=[[50_000, 2.95], [100_000, 2.79], [150_000, 2.81], [200_000, 2.46]])
    assert "rose" not in " ".join(recommend(reports.take_snapshot(study)).warnings)


def test_the_pareto_figure_says_one_pair_one_front_or_one_best_trial(tmp_path):
    from reports import series

    study = new_study()  # val_loss and peak memory
    add(study, values=[2.0, 1.0], trained=True)
    add(study, values=[2.5, 2.0], trained=True)  # dominated by #0
    snap = reports.take_snapshot(study)
    assert series.front_title(snap) == ("Pareto front: one trial, #0, is best on every "
                                        "objective (no trade-off)")
    add(study, values=[1.5, 3.0], trained=True)  # a trade-off: a front of two
    assert series.front_title(reports.take_snapshot(study)) == "Pareto front"
    html = reports.build(study, tmp_path)["report_html"].read_text()
    assert "<h2>Pareto front</h2>" in html and "Pareto fronts" not in html
