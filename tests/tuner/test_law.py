"""A law study: the response surface and power laws recover a known optimum and law, the
``[law]`` section's rules, and a whole law study with the known-law fake trainer."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tuner.modeling.laws.power_law import fit_power_law
from tuner.modeling.laws.response_surface import SurfaceError, fit_optimum
from tuner.study.specs.spec import SpecError, parse_spec
from tuner.study.workflows.law import budget_spec, predicted_point, snap
from tuner.testing import LAW_BATCH_EXPONENT, LAW_LR_EXPONENT, law_optimum

BATCHES = [2, 4, 8, 16, 32, 64]
FITTED = [16_384, 49_152, 147_456, 524_288]


def _trials(tokens: float, n: int, rng: np.random.Generator, sd: float = 0.01):
    """Random (lr, batch tokens, loss) around `law_optimum` of ``tokens`` (law_train's bowl)."""
    lr_star, b_star = law_optimum(tokens)
    lr = 10 ** rng.uniform(math.log10(3e-4), math.log10(6e-2), n)
    batch = rng.choice(BATCHES, n) * 128.0
    loss = (2 + np.log10(lr / lr_star) ** 2 + 0.5 * np.log10(batch / b_star) ** 2
            + rng.normal(0, sd, n))
    return lr, batch, loss


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_surface_places_the_known_optimum_inside_its_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lr, batch, loss = _trials(147_456, 16, rng)
    o = fit_optimum(lr, batch, loss)
    lr_star, b_star = law_optimum(147_456)
    assert o.lr_interval[0] <= lr_star <= o.lr_interval[1]
    assert abs(math.log10(o.lr / lr_star)) < 0.1
    assert o.batch_placed and o.batch_interval[0] <= b_star <= o.batch_interval[1]
    assert o.near_lr[0] < o.lr < o.near_lr[1]


def test_surface_beats_best_of_n_on_average() -> None:
    """The winner's curse: over many noisy studies the surface's lr* is closer to the truth."""
    lr_star = law_optimum(49_152)[0]
    err_surface, err_best = [], []
    for seed in range(20):
        lr, batch, loss = _trials(49_152, 12, np.random.default_rng(seed), sd=0.05)
        o = fit_optimum(lr, batch, loss, n_boot=20)
        err_surface.append(abs(math.log10(o.lr / lr_star)))
        err_best.append(abs(math.log10(lr[np.argmin(loss)] / lr_star)))
    assert np.median(err_surface) < np.median(err_best)


def test_surface_flags_an_optimum_beyond_the_range() -> None:
    rng = np.random.default_rng(0)
    lr = 10 ** rng.uniform(-4, -3, 10)  # every trial below the optimum near 3e-3
    loss = 2 + np.log10(lr / 3e-3) ** 2
    o = fit_optimum(lr, np.full(10, 1024.0), loss)
    assert "lr" in o.at_edge and not o.batch_placed
    assert o.lr == pytest.approx(lr.max())


@pytest.mark.parametrize("lr, why", [([1e-3] * 4, "at least 6"), ([1e-3] * 8, "one value")])
def test_surface_refuses_what_cannot_place_an_optimum(lr, why) -> None:
    with pytest.raises(SurfaceError, match=why):
        fit_optimum(lr, [1024.0] * len(lr), [2.0 + i for i in range(len(lr))])


def test_power_law_recovers_the_exponents_within_their_intervals() -> None:
    rng = np.random.default_rng(0)
    optima = [fit_optimum(*_trials(t, 16, rng)) for t in FITTED]
    lr = fit_power_law(FITTED, [o.lr for o in optima],
                       [[10 ** s[0] for s in o.samples] for o in optima])
    batch = fit_power_law(FITTED, [o.batch for o in optima],
                          [[10 ** s[1] for s in o.samples] for o in optima])
    assert lr.exponent_interval[0] <= LAW_LR_EXPONENT <= lr.exponent_interval[1]
    assert batch.exponent_interval[0] <= LAW_BATCH_EXPONENT <= batch.exponent_interval[1]
    held = 2_621_440
    lo, hi = lr.band(held)
    assert lo <= law_optimum(held)[0] <= hi
    assert lr.decades_past(held) == pytest.approx(math.log10(held / FITTED[-1]))


def _table(**law):
    return {"study": {"name": "lw"}, "law": {"tokens": FITTED} | law,
            "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1,
                                        "log": True},
                                 "batch_end": {"type": "categorical", "choices": BATCHES}},
                      "fixed": {"seq_len": 128, "batch_schedule": "constant"}}}


def _run_law(tmp_path, table, trainer, *, sampler: str):
    """The law ``table`` run end to end under ``tmp_path``/runs/lw by the fake ``trainer`` (4
    trials at once, seed 3): (spec, the stages' summaries, its storage url, what it logged)."""
    from tuner.study.workflows.stage_runner import run_stages

    table["study"] |= {"sampler": sampler, "max_concurrent": 4, "seed": 3}
    spec = parse_spec(table)
    run_dir = tmp_path / "runs" / "lw"
    said: list[str] = []
    runs = run_stages(spec, run_dir=run_dir, trainer=trainer, progress=False, log=said.append)
    return spec, runs, f"sqlite:///{run_dir / 'study.db'}", said


def _held_out_fit(lrs, losses, predicted_loss: float):
    """A law fit whose held-out budget searched ``(lrs, losses)`` at one batch and ran the
    predicted recipe (lr 2e-3) to ``predicted_loss``, its noise measured at sd 0.011."""
    from tuner.study.workflows.law_fit import BudgetResult, LawFit

    o = fit_optimum(lrs, [256.0] * len(lrs), losses, noise_sd=0.011)
    b = int(np.argmin(losses))
    held = BudgetResult(index=1, study="h", tokens=2_621_440, compute=2.6e12, held_out=True,
                        n_trials=len(lrs), optimum=o, error="",
                        best={"number": b + 1, "lr": lrs[b], "batch": 256.0, "loss": losses[b]},
                        noise_sd=0.011, predicted_trial={"number": 0, "lr": 2e-3,
                                                         "batch": 256.0, "loss": predicted_loss})
    small = BudgetResult(index=0, study="s", tokens=16_384, compute=1.6e10, held_out=False,
                         n_trials=8, optimum=None, error="", best={}, noise_sd=None,
                         predicted_trial={})
    return LawFit(name="h", variable="tokens", flops_per_token=1.0, params=1.0,
                  budgets=(small, held), lr_law=None, batch_law=None,
                  predicted={"lr": 2e-3, "lr_band": [1e-3, 4e-3]})


def _held_lines(h: dict) -> list[str]:
    """The law report's held-out section for the check ``h``."""
    from reports.laws.law import _held
    return _held({"held_out_check": h})


def test_a_surface_floor_below_every_trial_is_named_and_the_measured_gap_given() -> None:
    """A flat-bottomed bowl with a divergence wall (as real held-out budgets show at 8 trials):
    the quadratic's minimum falls far below every trial, so the predicted recipe looks many sd
    off the fitted optimum while it ties the best trial measured; the check says both."""
    x = np.linspace(math.log10(3e-4), math.log10(6e-2), 8)
    losses = np.where(x < -1.6, 1.50 + 0.01 * np.sin(7 * x), 1.5 + 3 * (x + 1.6))
    h = _held_out_fit(list(10 ** x), list(losses), 1.495).held_out_check()
    assert h is not None and h["floor_below_trials"]
    assert h["loss_gap_sd"] > 5  # against the fitted floor: the fit's gap
    assert abs(h["loss_gap_best_sd"] - (1.495 - losses.min()) / 0.011) < 1e-9
    assert abs(h["loss_gap_best_sd"]) < 1
    said = "\n".join(_held_lines(h))
    assert "(measured, a best of n: biased low)" in said
    assert "does not describe the bottom" in said


def test_a_surface_that_fits_its_bottom_is_not_flagged() -> None:
    """Trials on a true quadratic bowl: the fitted floor sits among the trials, no flag."""
    rng = np.random.default_rng(3)
    x = np.linspace(math.log10(3e-4), math.log10(6e-2), 8)
    losses = 1.5 + 0.3 * (x - math.log10(2e-3)) ** 2 + rng.normal(0, 0.011, 8)
    h = _held_out_fit(list(10 ** x), list(losses), 1.51).held_out_check()
    assert h is not None and not h["floor_below_trials"]
    assert "does not describe the bottom" not in "\n".join(_held_lines(h))


@pytest.mark.parametrize("law, field, rule", [
    ({"tokens": [1000, 2000, 4000]}, "law.tokens", "at least 4"),
    ({"tokens": [1000, 3000, 2000, 40000]}, "law.tokens", "must increase"),
    ({"tokens": [1000, 2000, 4000, 8000]}, "law.tokens", "1.5 decades"),
    ({"tokens": [64, 2000, 4000, 80000]}, "law.tokens", "one sequence"),
    ({"held_out": 1000}, "law.held_out", "above the largest"),
    ({"trials": -1}, "law.trials", ">= 0"),
    ({"mup": "yes"}, "law.mup", "true or false"),
    ({"widths": [1]}, "law", "unknown key"),
])
def test_bad_law_sections_name_the_field_and_rule(law, field, rule) -> None:
    with pytest.raises(SpecError, match=rf"^{field}: .*{rule}"):
        parse_spec(_table(**law))


def test_a_law_needs_lr_searched_and_no_ladder() -> None:
    t = _table()
    del t["space"]["params"]["lr"]
    with pytest.raises(SpecError, match="needs lr searched"):
        parse_spec(t)
    with pytest.raises(SpecError, match="cannot be combined with"):
        parse_spec(_table() | {"ladder": {"widths": [32, 64]}})


def test_budget_specs_and_the_predicted_point() -> None:
    spec = parse_spec(_table(held_out=2_621_440, trials=8))
    assert spec.to_dict()["law"]["held_out"] == 2_621_440
    names = [budget_spec(spec, i).name for i in range(5)]
    assert names == ["lw", "lw.t49152", "lw.t147456", "lw.t524288", "lw.t2621440"]
    b = budget_spec(spec, 2)
    assert b.budget.tokens_per_trial == 147_456 and b.study.n_trials == 8
    assert b.pruning.scheduler == "none" and b.law.budget == 2
    point = predicted_point(spec, {"lr": 2e-3, "batch": 2500.0}, {"lr": 1e-2, "batch_end": 4})
    assert point == {"lr": 2e-3, "batch_end": 16}  # 2500/128 = 19.5 -> 16 in log space
    held = budget_spec(spec, 4, predicted={"lr": 2e-3}, point=point)
    assert held.law.is_held_out and held.study.n_trials == 9
    assert held.start.enqueue == (point,)
    assert parse_spec(held.to_dict()).law.predicted == {"lr": 2e-3}  # stored spec round trip
    dists = spec.space.distributions()
    assert snap(dists["lr"], 1.0) == pytest.approx(0.1)


def test_a_law_study_recovers_the_known_law_and_exports_it(ray_session, tmp_path) -> None:
    """End to end with `law_train` (its optimum follows a known law, with noise): every budget
    runs in one storage, the held-out budget is predicted before it runs, and the export takes
    its LR and batch from the fitted laws."""
    import dataclasses

    import optuna

    from reports.laws.law import law_data, law_markdown
    from tuner import testing
    from tuner.export.export import export_study
    from tuner.export.pick import Pick
    from tuner.modeling.full_run import FullRunTarget, load_target
    from tuner.modeling.hardware import get_hardware
    from tuner.study.workflows.law_fit import budget_studies, fit_law
    from tuner.study.workflows.stage_runner import run_stages

    spec, runs, url, said = _run_law(tmp_path, _table(held_out=2_621_440, trials=10),
                                     testing.law_train, sampler="random")
    run_dir = tmp_path / "runs" / "lw"
    assert [s.done for s in runs] == [10, 10, 10, 10, 11]
    assert len(optuna.get_all_study_names(url)) == 5
    data = law_data(spec, url)
    lr_law, batch_law = data["lr_law"], data["batch_law"]
    # one study's intervals are checked for coverage over many seeds above; here, the fit
    assert abs(lr_law["exponent"] - LAW_LR_EXPONENT) < 0.03
    assert abs(batch_law["exponent"] - LAW_BATCH_EXPONENT) < 0.1
    assert data["batch_below_range"] is None  # the range reaches below B*: nothing to say
    assert lr_law["exponent_interval"][0] < lr_law["exponent"] < lr_law["exponent_interval"][1]
    held = data["held_out_check"]
    true_lr, true_batch = law_optimum(2_621_440)
    assert 1 / 1.5 <= held["lr_ratio"] <= 1.5 and 0.5 <= held["batch_ratio"] <= 2
    assert abs(math.log10(held["lr_predicted"] / true_lr)) < 0.1
    # the prediction was stored before the held-out budget's first trial ran
    assert any("predicted at 2621440" in line for line in said)
    # the whole law's progress: planned once, then each budget numbered from 1 with its size
    assert said[0].startswith("lw: 5 budgets, 51 trials")
    starts = [line for line in said if ": budget " in line]
    assert [line.split(" (")[0] for line in starts] == [f"lw: budget {i}/5" for i in range(1, 6)]
    assert "left at the last budget's" not in starts[0] and "left at" in starts[1]
    assert not any(line.startswith("law ") for line in said)  # no "law lw:" prefix
    assert held["loss_gap_sd"] < 3 and held["loss_gap_best_sd"] < 3
    assert not held["floor_below_trials"]  # the fake's bowl is quadratic: the floor fits
    assert 0 < data["compute_ratio"] < 1 / 3
    assert "Held-out budget" in law_markdown(data)
    # resuming a finished law adds nothing
    again = run_stages(spec, run_dir=run_dir, trainer=testing.law_train, progress=False,
                    log=said.append)
    assert [s.done for s in again] == [10, 10, 10, 10, 11]
    # the export: LR and final batch from the law at the full run
    store = optuna.storages.RDBStorage(url)
    fit = fit_law(spec, budget_studies(spec, store))
    law = fit.study_law()
    args, name = load_target("deepseek-v3-671b")
    target = FullRunTarget(model_args=args, name=name, hardware=get_hardware("h800"),
                           gpus=2048, tokens=int(14.8e12), seq_len=4096)
    largest = budget_studies(spec, store)[-1][1]
    # the fake's B* (~330k tokens at the full run, 7 decades past its budgets) barely moves the
    # published recipes' batch there, which lies outside the batch law's band: the lr law (each
    # budget's lr* at its own best batch) says nothing at that batch and does not move the
    # answer, the prior's; accepted as measured at B*, its LR is written, labelled
    full, _ = export_study(largest, Pick(kind="best-loss"), target, law=law)
    assert full.lr_at is not None and full.lr_at.lr is None
    assert "outside it" in full.lr_at.refusal
    assert full.answer is not None and not full.answer.law_used
    assert full.recipe.lr == pytest.approx(full.answer.lr)
    assert "does not move it" in next(r.rule for r in full.rules if r.field == "lr")
    target = dataclasses.replace(target, lr_at_fitted_batch=True)
    full, _ = export_study(largest, Pick(kind="best-loss"), target, law=law)
    assert full.lr_at is not None and full.lr_at.valid_at_batch == pytest.approx(
        law.batch.at(14.8e12))
    rule = next(r for r in full.rules if r.field == "lr")
    assert "the study's own law" in rule.rule and "decades past" in rule.rule
    assert full.recipe.lr == pytest.approx(law.lr.at(14.8e12))
    assert full.hidden_lr == pytest.approx(full.recipe.lr * 64 / args.dim)
    plain, _ = export_study(largest, Pick(kind="best-loss"), target)
    assert plain.answer is not None and plain.answer.law is None
    assert plain.recipe.lr == pytest.approx(plain.answer.lr)


def test_a_batch_range_above_every_optimum_is_named_not_left_silent(ray_session,
                                                                     tmp_path) -> None:
    """Real trainings here put every budget's batch optimum at the smallest batch searched
    (benchmarks/RESULTS.md): a law whose batch range lies above the optimum at every budget
    places no batch law, and law.md says why and what to do, rather than 'not searched'."""
    from reports.laws.law import law_data, law_markdown
    from tuner import testing
    from tuner.study.workflows.stage_runner import run_stages

    table = _table(trials=10)
    # law_train's B* is 600-1700 tokens over FITTED: 32-128 sequences of 128 lie above it
    table["space"]["params"]["batch_end"]["choices"] = [32, 64, 128]
    table["study"] |= {"sampler": "random", "max_concurrent": 4, "seed": 1}
    spec = parse_spec(table)
    run_dir = tmp_path / "runs" / "lw"
    run_stages(spec, run_dir=run_dir, trainer=testing.law_train, progress=False,
            log=lambda _: None)
    data = law_data(spec, f"sqlite:///{run_dir / 'study.db'}")
    assert data["batch_law"] is None
    assert data["batch_below_range"] == 32 * 128
    assert all("batch" in b["optimum"]["at_edge"] for b in data["budgets"])
    assert "every budget's optimum sits at the smallest batch it searched" in \
        law_markdown(data)


def test_the_shipped_law_spec_validates_as_documented() -> None:
    from collections import defaultdict
    from pathlib import Path

    import optuna

    from tuner.study.specs.spec import load_spec
    from tuner.study.trial.samplers import make_sampler
    from tuner.study.workflows.law import budget_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "law.toml")
    law = spec.law
    assert law.on and law.mup and law.held_out >= 5 * law.tokens[-1]
    assert len(law.tokens) >= 4 and math.log10(law.tokens[-1] / law.tokens[0]) >= 1.5
    # the grid: lr searched at >= 3 batches spanning >= 1 decade, at every budget; fp32 fixed
    assert len(law.batches) >= 3 and law.batches[-1] / law.batches[0] >= 10
    assert law.held_out_batch >= 4 * law.batches[-1]
    assert spec.space.names() == ("lr", "batch_end") and "batch_end" not in spec.space.fixed
    assert spec.space.fixed["precision"] == "fp32"
    # qmc's scrambled Sobol design within each batch's block: every (budget, batch) cell puts
    # one trial in each eighth of the lr axis (log scale), at the held-out budget too (its
    # enqueued predicted recipe takes no point of the design)
    n = spec.study.n_trials
    assert spec.study.sampler == "qmc" and n == 8 * len(law.batches)
    lr = spec.space.distributions()["lr"]
    lo, hi = math.log(lr.low), math.log(lr.high)
    for i, point in ((0, None), (len(law.tokens), {"lr": 2e-3, "batch_end": law.batches[1]})):
        bspec = budget_spec(spec, i, predicted={"lr": 2e-3} if point else None, point=point)
        study = optuna.create_study(sampler=make_sampler(bspec))
        if point:
            study.enqueue_trial(point)
        for _ in range(bspec.study.n_trials):
            study.tell(study.ask(bspec.space.distributions()), 0.0)
        cells = defaultdict(list)
        for t in study.trials[1 if point else 0:]:
            cells[t.params["batch_end"]].append(
                min(7, int(8 * (math.log(t.params["lr"]) - lo) / (hi - lo))))
        assert {b: sorted(e) for b, e in cells.items()} == {
            b: list(range(8)) for b in law.batches}, (i, dict(cells))


@pytest.mark.parametrize("law, space, field, rule", [
    ({"batches": [2, 8]}, None, "law.batches", "at least 3"),
    ({"batches": [2, 8, 16]}, None, "law.batches", "1 decade"),
    ({"batches": [2, 32, 8]}, None, "law.batches", "must increase"),
    ({"batches": [0, 4, 16]}, None, "law.batches", "positive integer"),
    ({"batches": "1,4,16"}, None, "law.batches", "list of at least 3"),
    ({"batches": [1, 4, 16]}, {"fixed": {"batch_end": 2}}, "space.fixed.batch_end",
     "must not be set"),
    ({"batches": [1, 4, 16]}, {"batch_end": [1, 4, 32]}, "space.params.batch_end",
     r"categorical \[1, 4, 16\]"),
    ({"batches": [1, 4, 16]}, {"seq_len": [64, 128]}, "space.params.seq_len",
     "must not be searched"),
    ({"batches": [1, 4, 16], "trials": 16}, None, "law.trials", "multiple of"),
    ({"batches": [1, 4, 16], "held_out_batch": 32}, None, "law.held_out_batch", "4x"),
    ({"held_out_batch": 64}, None, "law.held_out_batch", "with law.batches"),
    ({"batches": [1, 4, 16], "held_out": 2_621_440, "held_out_at_batch": 8}, None,
     "law.held_out_at_batch", r"one of law.batches \[1, 4, 16\]"),
    ({"batches": [1, 4, 16], "held_out_at_batch": 16}, None, "law.held_out_at_batch",
     "with law.held_out"),
    ({"batches": [1, 4, 16], "held_out": 2_621_440, "held_out_at_batch": [16]}, None,
     "law.held_out_at_batch", "must be 0"),
    ({"batches": [1, 4, 16], "held_out": 2_621_440, "held_out_batch": 64,
      "held_out_batch_budget": 2_621_440}, None, "law.held_out_batch_budget",
     r'must be "largest" .* or, with law.held_out, "held_out"'),
    ({"batches": [1, 4, 16], "held_out_batch": 64, "held_out_batch_budget": "held_out"}, None,
     "law.held_out_batch_budget", "with law.held_out"),
])
def test_bad_law_batches_name_the_field_and_rule(law, space, field, rule) -> None:
    t = _table(**law)
    del t["space"]["params"]["batch_end"]
    for name, choices in (space or {}).items():
        if name == "fixed":
            t["space"]["fixed"] |= choices
        else:
            t["space"]["fixed"].pop(name, None)
            t["space"]["params"][name] = {"type": "categorical", "choices": choices}
    with pytest.raises(SpecError, match=rf"^{field}: .*{rule}"):
        parse_spec(t)


def test_law_batches_add_batch_end_to_the_space_and_the_stored_spec_reads_back() -> None:
    t = _table(batches=[1, 4, 16], trials=12)
    del t["space"]["params"]["batch_end"]
    spec = parse_spec(t)
    assert spec.space.distributions()["batch_end"] == optuna_categorical([1, 4, 16])
    assert spec.to_dict()["law"]["batches"] == [1, 4, 16]
    again = parse_spec(spec.to_dict())  # a stored spec searches batch_end exactly so
    assert again.space == spec.space and again.law == spec.law
    t["space"]["params"]["batch_end"] = {"type": "categorical", "choices": [1, 4, 16]}
    assert parse_spec(t).space == spec.space
    # the held-out batch: the last budget, at the largest fitted tokens, searching its batch
    del t["space"]["params"]["batch_end"]
    spec = parse_spec(t | {"law": t["law"] | {"held_out": 2_621_440, "held_out_batch": 64}})
    assert spec.law.budgets[-2:] == (2_621_440, 524_288)
    hob = budget_spec(spec, 5, predicted={"lr": 3e-3}, point={"lr": 3e-3, "batch_end": 64})
    assert hob.name == "lw.t524288.b64" and hob.law.is_held_out_batch
    assert hob.space.distributions()["batch_end"] == optuna_categorical([64])
    assert hob.study.n_trials == 13 and hob.budget.tokens_per_trial == 524_288
    again = parse_spec(hob.to_dict())  # its stored spec reads back
    assert again.law.predicted == {"lr": 3e-3} and again.space == hob.space
    held = budget_spec(spec, 4, predicted={"lr": 2e-3}, point={"lr": 2e-3, "batch_end": 4})
    assert parse_spec(held.to_dict()).study.n_trials == 13  # 12 + its predicted trial
    # at the held-out budget: 5x the steps, after that budget (its own name, its tokens)
    spec = parse_spec(t | {"law": t["law"] | {"held_out": 2_621_440, "held_out_batch": 64,
                                              "held_out_batch_budget": "held_out"}})
    assert spec.law.budgets[-2:] == (2_621_440, 2_621_440) and spec.law.held_out_batch_index == 5
    hob = budget_spec(spec, 5, predicted={"lr": 3e-3}, point={"lr": 3e-3, "batch_end": 64})
    assert hob.name == "lw.t2621440.b64" and hob.budget.tokens_per_trial == 2_621_440
    assert budget_spec(spec, 4).name == "lw.t2621440"
    again = parse_spec(hob.to_dict())
    assert again.law == hob.law and again.law.held_out_batch_at == 2_621_440


def test_a_held_out_budget_at_one_batch_searches_it_alone_and_starts_at_lr_there() -> None:
    """``held_out_at_batch``: the held-out budget alone searches that one batch (its stored spec
    reads back so), every fitted budget all of them; its first trial runs lr*(D, B) at that
    batch, not the law's lr at another batch."""
    t = _table(batches=[1, 4, 16], trials=12, held_out=2_621_440, held_out_at_batch=16)
    del t["space"]["params"]["batch_end"]
    spec = parse_spec(t)
    assert spec.to_dict()["law"]["held_out_at_batch"] == 16
    assert [spec.law.batches_at(i) for i in range(5)] == [(1, 4, 16)] * 4 + [(16,)]
    for i in range(4):
        assert budget_spec(spec, i).space == spec.space
    prediction = {"lr": 2e-3, "lr_band": [1e-3, 4e-3], "at_batch": 2048.0}
    point = predicted_point(budget_spec(spec, 4), prediction, {"lr": 1e-2, "batch_end": 1})
    assert point == {"lr": 2e-3, "batch_end": 16}  # not the largest budget's best batch, 1
    held = budget_spec(spec, 4, predicted=prediction, point=point)
    assert held.space.distributions()["batch_end"] == optuna_categorical([16])
    assert held.study.n_trials == 13 and held.law.stage_batches == (16,)
    again = parse_spec(held.to_dict())
    assert again.space == held.space and again.law.predicted == prediction


def optuna_categorical(choices):
    import optuna

    return optuna.distributions.CategoricalDistribution(choices)


def test_budget_zero_reports_say_the_answer_is_the_law(tmp_path) -> None:
    from reports.laws.law import annotate_budget_report

    (tmp_path / "ranked.md").write_text("# Study `lw`: ranked trials\n\n## Recommendation\n")
    (tmp_path / "report.html").write_text("<html><body><h1>Study</h1><h2>Recommendation</h2>")
    data = {"name": "lw", "budgets": [{"tokens": 16384}], "mup": True,
            "full_run": {"target": "deepseek-v3-671b", "tokens": 1.48e13, "lr": 6e-5,
                         "lr_band": [4e-5, 9e-5], "decades_past": 7.5, "compute": 3.6e24,
                         "lr_at_batch": 4.6e7, "lr_batch_rule": "the prior's batch",
                         "answer": {"law_weight": 0.02, "disagree": ""},
                         "answer_rule": "the published recipes' prior ...",
                         "law_lr": 3e-6, "law_band": [1e-9, 1e-2],
                         "deepseek_llm_lr": 2.6e-4, "deepseek_llm_batch": 3.2e7}}
    annotate_budget_report(tmp_path, data)
    md = (tmp_path / "ranked.md").read_text()
    assert md.index("budget 0 of the law study lw") < md.index("## Recommendation")
    assert "**lr 6e-05** (95% band 4e-05–9e-05, 2.25x)" in md and "7.5 decades" in md
    page = (tmp_path / "report.html").read_text()
    assert page.index("<h2>Scaling law</h2>") < page.index("<h2>Recommendation</h2>")
    assert "<b>This study is budget 0" in page and "../law/law.png" in page


def test_a_law_budget_of_few_steps_is_warned_about():
    """A budget whose trials at the largest batch make under 50 steps is mostly warmup (the
    law benchmark's 16-step budget bent its law): the spec says so before anything runs."""
    import tomllib

    from tuner.study.run.preflight import MIN_HELD_OUT_BATCH_STEPS, MIN_LAW_STEPS, load_warnings

    table = tomllib.loads((Path(__file__).resolve().parents[2] / "search_spaces" /
                           "law.toml").read_text())
    # the shipped grid's 16 x 128-token cells: 8 steps at 16k tokens, 24 at 49k (its header
    # says so), 72 at 147k
    lines = load_warnings(parse_spec(table))
    assert [line.split(":")[0] for line in lines] == [
        "law.tokens[0] = 16384", "law.tokens[1] = 49152"], lines
    assert "8 optimizer steps" in lines[0] and f"under {MIN_LAW_STEPS} steps" in lines[0]
    # the held-out batch at the largest fitted budget: 64 steps of 8,192 tokens, where its bowl
    # was flat; the shipped one runs at the held-out budget (320 steps) and is not warned about
    table["law"]["held_out_batch_budget"] = "largest"
    (held_batch,) = load_warnings(parse_spec(table))[2:]
    assert held_batch.startswith("law.held_out_batch = 64: 64 optimizer steps at its budget "
                                 f"(524288 tokens); under {MIN_HELD_OUT_BATCH_STEPS}")
    assert held_batch.endswith('(law.held_out_batch_budget = "held_out")')
    # one batch of 2 x 128 tokens: 64 steps at the smallest budget, nothing to say
    del table["law"]["batches"], table["law"]["held_out_batch"]
    table["space"]["fixed"]["batch_end"] = 2
    assert not load_warnings(parse_spec(table))


GRID = [2, 8, 32]  # batch_end: 256, 1,024 and 4,096 tokens per step (1.2 decades)


def test_a_law_study_over_the_grid_recovers_lr_in_tokens_and_batch_and_exports_it(
        ray_session, tmp_path, capsys) -> None:
    """End to end with `law_batch_train` (its lr* moves with the budget and the batch by a known
    law, with noise): ``[law] batches`` makes every budget search lr at each batch, 8 trials per
    cell, the law fits lr*(D, B) through the 12 cells, and `moetune export` writes, at the
    batch it writes, that law's LR with its band as numbers (no refusal: the study varied the
    batch)."""
    import json

    import optuna

    from reports.laws.law import law_data, law_markdown
    from tuner import testing
    from tuner.app.cli import main
    from tuner.modeling.laws.lr_batch_law import LrBatchLaw
    from tuner.study.specs.proxy import resolve_model_args
    from tuner.study.workflows.stage_runner import run_stages

    table = _table(trials=24, batches=GRID, held_out=2_621_440, held_out_batch=4 * GRID[-1])
    del table["space"]["params"]["batch_end"]
    table["study"] |= {"sampler": "qmc", "max_concurrent": 4, "seed": 5}
    table["full_run"] = {"target": "deepseek-v3-671b", "hardware": "h800", "gpus": 2048,
                         "tokens": 14_800_000_000_000, "seq_len": 4096}
    spec = parse_spec(table)
    run_dir = tmp_path / "runs" / "lw"
    said: list[str] = []
    runs = run_stages(spec, run_dir=run_dir, trainer=testing.law_batch_train, progress=False,
                   log=said.append)
    assert [s.done for s in runs] == [24] * 4 + [25, 25]  # + each held-out predicted trial
    url = f"sqlite:///{run_dir / 'study.db'}"
    store = optuna.storages.RDBStorage(url)
    assert sorted(optuna.get_all_study_names(url)) == [
        "lw", "lw.t147456", "lw.t2621440", "lw.t49152", "lw.t524288", "lw.t524288.b128"]
    for name in ("lw", "lw.t49152", "lw.t147456", "lw.t524288"):  # every cell: 8 trials
        trials = optuna.load_study(study_name=name, storage=store).trials
        assert sorted(t.params["batch_end"] for t in trials) == sorted(GRID * 8)
    # the held-out batch, 4x the largest: predicted before it ran, then searched at 128 alone
    assert any("predicted at 524288 tokens and 16384 tokens per step" in line for line in said)
    trials = optuna.load_study(study_name="lw.t524288.b128", storage=store).trials
    assert {t.params["batch_end"] for t in trials} == {128}
    data = law_data(spec, url)
    assert data["lr_batch_law"] is not None, data["lr_batch_note"]
    law = LrBatchLaw.from_dict(data["lr_batch_law"])
    assert law.n_cells == 15  # the held-out budget's 3 cells joined once its check was made
    # law.md's answer is the export's: the published recipes' prior at the batch it writes,
    # moved by lr*(D, B) read there (never the lr law in D alone), with the law's own reading
    full = data["full_run"]
    batch = full["lr_at_batch"]
    assert full["law_lr"] == pytest.approx(law.at(14.8e12, batch))
    assert full["lr_band"][0] < full["lr"] < full["lr_band"][1]
    assert full["lr_in_d"] != pytest.approx(full["law_lr"])
    answer = law_markdown(data).split("## Each budget's optimum")[0]
    assert "the published recipes' prior" in answer and "an LR without its batch" in answer
    assert "The team's law alone there" in answer
    if spec.law.mup:  # like with like: the hidden matrices' LR beside a published one
        assert full["width_mult"] == pytest.approx(7168 / resolve_model_args(spec).dim)
        assert f"lr / width_mult = {full['lr'] / full['width_mult']:.3g}" in answer
    else:
        assert full["width_mult"] is None
    for tokens in FITTED:  # the known lr*(D, B) at every cell
        for b in GRID:
            truth = testing.law_lr_batch_optimum(tokens, b * 128)
            assert abs(math.log10(law.at(tokens, b * 128) / truth)) < math.log10(1.25)
    a, b_exp, c = testing.LAW_LR_BATCH
    assert abs(law.batch_exponent(1e5) - b_exp) < 0.1
    assert abs(law.tokens_exponent(1024.0) - a) < 0.1
    assert "through 15 (budget, batch) cells" in law_markdown(data)
    # the held-out budget, 5x above: lr*(D, B) predicted at each of its batches before it ran
    cells = data["held_out_check"]["cells"]
    assert [c["batch"] for c in cells] == [b * 128 for b in GRID]
    for c in cells:
        truth = testing.law_lr_batch_optimum(2_621_440, c["batch"])
        assert c["lr_inside"] and abs(math.log10(c["lr"] / truth)) < math.log10(1.25), c
        assert abs(math.log10(c["lr_measured"] / truth)) < math.log10(1.5), c
    assert "| lr at B = 4096 tokens (lr*(D, B)) |" in law_markdown(data)
    hob = data["held_out_batch_check"]
    truth = testing.law_lr_batch_optimum(524_288, 128 * 128)
    assert hob["batch"] == 128 * 128 and hob["lr_inside"]
    assert abs(math.log10(hob["lr_predicted"] / truth)) < math.log10(1.25)
    assert abs(math.log10(hob["lr_measured"] / truth)) < math.log10(1.5)
    assert hob["decades_past"]["batch"] == pytest.approx(math.log10(4))
    assert "## Held-out batch: predicted before it ran" in law_markdown(data)
    # the export writes the one answer law.md states (the same function), at the same batch;
    # the law's own reading rides along as numbers, its band carrying the known truth
    out = tmp_path / "out" / "run.json"
    argv = ["export", "lw", "--storage", url, "--target", "deepseek-v3-671b", "--gpus", "2048",
            "--tokens", "14.8e12", "--format", "native", "--out", str(out), "--pick", "knee"]
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    # the other knobs come from the held-out budget, not the held-out batch (524,288 tokens)
    assert "; other knobs from lw.t2621440;" in capsys.readouterr().err
    lr = json.loads(out.read_text())["lr"]
    assert lr["lr"] == pytest.approx(full["lr"]) and lr["for_batch_tokens"] == batch
    assert lr["answer"]["band"] == pytest.approx(full["lr_band"])
    assert lr["answer"]["width"] <= 4 and lr["answer"]["law_lr"] == pytest.approx(
        law.at(14.8e12, batch), rel=1e-6)
    assert lr["valid_at_batch"] is None and lr["source"] == "scaled"  # any batch: no refusal
    assert (lr["band"]["lo"], lr["band"]["hi"]) == pytest.approx(law.band(14.8e12, batch))
    assert lr["band"]["decades_past_batch"] == pytest.approx(math.log10(batch / 4096))
    # the known law's lr at the full run's tokens and batch, 7.5 decades out, inside its band
    assert lr["band"]["lo"] < testing.law_lr_batch_optimum(14.8e12, batch) < lr["band"]["hi"]


def test_a_held_out_budget_at_one_batch_checks_lr_in_tokens_and_batch_there(ray_session,
                                                                            tmp_path) -> None:
    """End to end with `law_batch_train`: ``held_out_at_batch`` makes the held-out budget search
    the largest batch alone; its prediction, stored before it ran, is lr*(D, B) at that batch
    (its first trial runs it), and the check and law.md judge that against the optimum there."""
    import optuna

    from reports.laws.law import law_data, law_markdown
    from tuner import testing
    from tuner.study.store import storage as st

    table = _table(trials=18, batches=GRID, held_out=2_621_440, held_out_at_batch=GRID[-1],
                   held_out_batch=4 * GRID[-1], held_out_batch_budget="held_out")
    del table["space"]["params"]["batch_end"]
    spec, runs, url, said = _run_law(tmp_path, table, testing.law_batch_train, sampler="qmc")
    assert [s.done for s in runs] == [18] * 4 + [19, 19]
    held = optuna.load_study(study_name="lw.t2621440", storage=url)
    assert {t.params["batch_end"] for t in held.trials} == {GRID[-1]}
    predicted = st.stored_spec(held).law.predicted
    assert predicted["at_batch"] == GRID[-1] * 128 and "batch" not in predicted
    assert predicted["lr"] == predicted["cells"][0]["lr"]  # lr*(D, B) at the batch it searched
    assert held.trials[0].params["lr"] == pytest.approx(predicted["lr"])
    assert any("lr*(D, B) at 4096 tokens per step, the one batch it searches" in line
               for line in said)
    said_run = said
    data = law_data(spec, url)
    h = data["held_out_check"]
    truth = testing.law_lr_batch_optimum(2_621_440, GRID[-1] * 128)
    assert h["lr_predicted"] == predicted["lr"] and "batch_predicted" not in h
    assert abs(math.log10(h["lr_predicted"] / truth)) < math.log10(1.25)
    assert abs(math.log10(h["lr_measured"] / truth)) < math.log10(1.5)
    assert [c["batch"] for c in h["cells"]] == [GRID[-1] * 128]
    assert h["lr_measured"] == h["cells"][0]["lr_measured"]  # measured as the cells are
    md = law_markdown(data)
    assert md.count("| lr at B = 4096 tokens, the one batch searched (lr*(D, B)) |") == 1
    assert "| lr |" not in md.split("## Held-out budget")[1].split("##")[0]
    from tuner.export.answers import law_answer

    _, law, said = law_answer(held, tmp_path / "runs" / "lw", "")
    assert law is not None and f"lr {h['lr_ratio']:.2f} at 4096 tokens per step, the one " \
        "batch it searched" in said
    # the held-out batch at the held-out budget: predicted after that budget's check, from
    # the 12 fitted cells and the held-out one it joined the law with, then searched there
    assert any("predicted at 2621440 tokens and 16384 tokens per step from 13 cells" in line
               for line in said_run), said_run
    hob_study = optuna.load_study(study_name="lw.t2621440.b128", storage=url)
    assert {t.params["batch_end"] for t in hob_study.trials} == {4 * GRID[-1]}
    hob = data["held_out_batch_check"]
    assert hob["tokens"] == 2_621_440 and hob["decades_past"]["tokens"] == 0
    truth = testing.law_lr_batch_optimum(2_621_440, 4 * GRID[-1] * 128)
    assert hob["lr_inside"] and abs(math.log10(hob["lr_predicted"] / truth)) < math.log10(1.25)
    assert ("At 2621440 tokens (the held-out budget, which joined the law after its check) and "
            "16384 tokens per step (160 steps; 0.60 decades past") in md


def test_law_md_says_where_the_budgets_sit_in_tokens_per_parameter() -> None:
    """The answer says the fitted and held-out budgets' tokens per parameter beside the full
    run's: a law fitted at a few tokens per parameter is extrapolated in regime, not only in D."""
    from reports.laws.law import _regime

    budgets = [{"tokens": t, "held_out": False} for t in (16_384, 524_288)]
    budgets += [{"tokens": 2_621_440, "held_out": True},
                {"tokens": 524_288, "held_out": False, "held_out_batch": True}]
    data = {"params": 115_936.0, "budgets": budgets,
            "full_run": {"tokens": 1.48e13, "params": 3.57e10}}
    line = _regime(data)[0]
    assert "(N = 115,936) on 0.141–4.52, the held-out budget on 22.6" in line
    assert "the full run trains N = 3.57e+10 on 415" in line
    assert _regime(data | {"full_run": {"tokens": 1.48e13}}) == []  # no target counted: silent


def test_moetune_submit_of_a_law_ends_with_its_answer_in_one_line(ray_session, tmp_path,
                                                                 capsys) -> None:
    """`moetune submit` of a law study, as a user runs it: every budget's line, the law's
    report files, then the answer in one line (the full run's lr or that the law does not pin
    it, and the held-out check)."""
    from tuner.app.cli import main

    spec = tmp_path / "lw.toml"
    spec.write_text(f"""
[study]
name = "lw"
n_trials = 6
sampler = "random"
max_concurrent = 2
seed = 1
[law]
tokens = {list(FITTED)}
held_out = 2_621_440
[full_run]
target = "deepseek-v3-671b"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-1
log = true
[space.fixed]
seq_len = 128
batch_schedule = "constant"
batch_end = 2
""")
    root = tmp_path / "runs"
    rc = main(["submit", str(spec), "--root", str(root), "--trainer",
               "tuner.testing:law_train", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"law report: {root / 'lw' / 'law' / 'law.md'}" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("law lw: full run (") and last.endswith("(law.md).")
    assert "; held-out budget: predicted / measured lr " in last
