"""The pooled lr law: one surface over every budget's trials whose bowls' bottoms lie on a power
law (`tuner.modeling.laws.pooled_law`), against a known law, against the line through per-budget
optima, and inside a whole law study run at one batch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.modeling.laws.pooled_law import PooledLawError, fit_pooled_law
from tuner.modeling.laws.power_law import fit_power_law
from tuner.modeling.laws.response_surface import fit_optimum

TOKENS = [4_096, 13_312, 40_960, 131_072]
HELD = 655_360
EXPONENT = -0.3
LR_HELD = 4e-3  # the true lr* at HELD
CURVATURES = [2.0, 0.8, 0.4, 0.2]  # the bowls narrow as the budget grows (as measured here)


def true_lr(tokens: float, bend: float = 0.0) -> float:
    """The known law; ``bend`` > 0 curves it in log-log (no power law then)."""
    u = math.log10(tokens / HELD)
    return LR_HELD * 10 ** (EXPONENT * u + bend * u * u)


def trials(rng: np.random.Generator, *, sd: float = 0.05, bend: float = 0.0,
           n: int = 8, low: float = 3e-4, high: float = 6e-2, first_off: float = 1.0,
           tokens=TOKENS, curvatures=CURVATURES):
    """Per budget (``tokens``, its bowl's ``curvatures``): n lrs stratified over [low, high]
    (one in each 1/n of the log range, as qmc places them) and their val_loss: a bowl around
    the true lr* plus noise of sd. The smallest budget's optimum sits ``first_off`` times off
    the law (a budget of few steps)."""
    lrs, losses = [], []
    for i, (t, k) in enumerate(zip(tokens, curvatures)):
        x = math.log10(low) + (rng.permutation(n) + rng.random(n)) / n * math.log10(high / low)
        star = true_lr(t, bend) * (first_off if i == 0 else 1.0)
        z = 2.0 + k * (x - math.log10(star)) ** 2 + rng.normal(0.0, sd, n)
        lrs.append(10 ** x)
        losses.append(z)
    return lrs, losses


def line_through_optima(lrs, losses):
    """The per-budget path: each budget's optimum, the censored ones left out, then a line."""
    kept = []
    for i, (t, lr, z) in enumerate(zip(TOKENS, lrs, losses)):
        o = fit_optimum(lr, [256.0] * len(lr), z, seed=i, n_boot=100)
        if "lr" not in o.at_edge:
            kept.append((t, o))
    return fit_power_law([t for t, _ in kept], [o.lr for _, o in kept],
                         [[10 ** s[0] for s in o.samples] for _, o in kept])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pooled_law_recovers_the_exponent_and_predicts_the_held_out_budget(seed):
    pooled = fit_pooled_law(TOKENS, *trials(np.random.default_rng(seed)), seed=seed)
    law = pooled.law
    assert law.exponent_interval[0] <= EXPONENT <= law.exponent_interval[1]
    lo, hi = law.band(HELD)
    assert lo <= LR_HELD <= hi
    assert abs(math.log10(law.at(HELD) / LR_HELD)) < math.log10(1.5)
    assert [b.index for b in pooled.bowls] == [0, 1, 2, 3]
    assert pooled.lack_of_fit_p > 0.01  # a true power law is not rejected


def test_pooled_predicts_as_well_as_the_line_through_optima_with_a_narrower_band():
    """Over 24 synthetic law studies at the noise measured on this machine's real trainings
    (sd 0.07 per trial, 8 trials per budget): about as close to the true held-out lr* (its
    mean error in decades within 0.03 of the line's; benchmarks/RESULTS.md has 40-study
    figures) with a band narrower in most studies."""
    err = {"pooled": [], "line": []}
    width = {"pooled": [], "line": []}
    for seed in range(24):
        lrs, losses = trials(np.random.default_rng(100 + seed), sd=0.07)
        for name, law in (("pooled", fit_pooled_law(TOKENS, lrs, losses, n_boot=60).law),
                          ("line", line_through_optima(lrs, losses))):
            err[name].append(abs(math.log10(law.at(HELD) / LR_HELD)))
            lo, hi = law.band(HELD)
            width[name].append(hi / lo)
    assert np.mean(err["pooled"]) < np.mean(err["line"]) + 0.03
    assert np.median(width["pooled"]) < np.median(width["line"])


def test_a_budget_whose_optimum_lies_beyond_its_range_still_counts():
    """Budget 0's lr* (0.018 here) sits above its range (top 0.015): a line through optima
    drops it; the pooled fit keeps its trials, which say the optimum lies above."""
    rng = np.random.default_rng(7)
    lrs, losses = trials(rng, high=1.5e-2)
    assert true_lr(TOKENS[0]) > 1.5e-2 > true_lr(TOKENS[1])
    pooled = fit_pooled_law(TOKENS, lrs, losses)
    assert [b.index for b in pooled.bowls] == [0, 1, 2, 3]
    assert not pooled.bowls[0].inside and pooled.bowls[3].inside
    assert pooled.law.exponent_interval[0] <= EXPONENT <= pooled.law.exponent_interval[1]


def test_the_lack_of_fit_test_flags_a_law_that_bends():
    """lr* curving in log-log (flattening toward large budgets, as the short budgets measured
    here do): most fits say one power law does not hold; a straight law rarely."""
    bent = [fit_pooled_law(TOKENS, *trials(np.random.default_rng(s), sd=0.02, bend=0.35),
                           n_boot=20, trim=False).lack_of_fit_p for s in range(8)]
    straight = [fit_pooled_law(TOKENS, *trials(np.random.default_rng(s), sd=0.02),
                               n_boot=20, trim=False).lack_of_fit_p for s in range(8)]
    assert sum(p < 0.05 for p in bent) >= 6
    assert sum(p < 0.05 for p in straight) <= 2


def test_a_smallest_budget_off_the_law_is_left_out_and_said():
    """Budget 0's optimum 4x above the law (as 16-step trials put it here): with it one power
    law does not hold; the fit leaves it out, says with which p, and recovers the law."""
    lrs, losses = trials(np.random.default_rng(3), sd=0.02, first_off=4.0)
    kept = fit_pooled_law(TOKENS, lrs, losses, trim=False)
    assert kept.lack_of_fit_p < 0.05 and not kept.left_out
    assert not kept.law.exponent_interval[0] <= EXPONENT <= kept.law.exponent_interval[1]
    trimmed = fit_pooled_law(TOKENS, lrs, losses)
    assert [i for i, _ in trimmed.left_out] == [0]
    assert trimmed.left_out[0][1] == pytest.approx(kept.lack_of_fit_p)
    assert [b.index for b in trimmed.bowls] == [1, 2, 3]
    assert trimmed.law.exponent_interval[0] <= EXPONENT <= trimmed.law.exponent_interval[1]
    assert abs(math.log10(trimmed.law.at(HELD) / LR_HELD)) < math.log10(1.5)
    assert trimmed.law.x_min == pytest.approx(TOKENS[1])


def test_what_cannot_place_a_pooled_law_is_refused():
    rng = np.random.default_rng(0)
    lrs, losses = trials(rng)
    with pytest.raises(PooledLawError, match="at least 3 budgets"):
        fit_pooled_law(TOKENS[:2], lrs[:2], losses[:2])
    with pytest.raises(PooledLawError, match="at least 3 budgets"):  # 3 trials are too few
        fit_pooled_law(TOKENS, [lr[:3] for lr in lrs], [z[:3] for z in losses])
    with pytest.raises(PooledLawError, match="one lr"):
        fit_pooled_law(TOKENS, [lrs[0], lrs[1], [1e-3] * 8, lrs[3]], losses)


@pytest.fixture(scope="module")
def law_at_one_batch(ray_session, tmp_path_factory):
    """A whole law study with `law_train` at one batch, its held-out budget included: (spec,
    storage url), run once for the tests below (~100 s)."""
    from tuner import testing
    from tuner.study.specs.spec import parse_spec
    from tuner.study.workflows.stage_runner import run_stages

    spec = parse_spec({
        "study": {"name": "pool", "sampler": "qmc", "max_concurrent": 4, "seed": 1},
        "law": {"tokens": [16_384, 49_152, 147_456, 524_288], "held_out": 2_621_440,
                "trials": 8},
        "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
                  "fixed": {"seq_len": 128, "batch_schedule": "constant", "batch_end": 8}}})
    run_dir = tmp_path_factory.mktemp("law") / "runs" / "pool"
    run_stages(spec, run_dir=run_dir, trainer=testing.law_train, progress=False,
            log=lambda _: None)
    return spec, f"sqlite:///{run_dir / 'study.db'}"


def test_a_law_study_at_one_batch_pools_its_lr_law_and_says_so(law_at_one_batch):
    """End to end with `law_train` at one batch: the lr law is the pooled one over every
    budget, the line through the optima is kept beside it, law.md says which, and an export
    from a law whose budgets do not lie on one power law warns so."""
    import dataclasses

    import optuna

    from reports.laws.law import law_data, law_markdown
    from tuner import testing
    from tuner.export.export import export_study
    from tuner.export.pick import Pick
    from tuner.modeling.full_run import FullRunTarget, load_target
    from tuner.modeling.hardware import get_hardware
    from tuner.study.workflows.law_fit import budget_studies, fit_law

    spec, url = law_at_one_batch
    data = law_data(spec, url)
    # the held-out budget's search ended: it joined the law (budget 4)
    assert data["lr_method"] == "pooled" and data["lr_budgets"] == [0, 1, 2, 3, 4]
    assert data["held_out_in_law"]
    assert data["lr_line"] is not None and data["pooled"]["lack_of_fit_p"] > 0.05
    assert abs(data["lr_law"]["exponent"] - testing.LAW_LR_EXPONENT) < 0.05
    held = data["held_out_check"]
    assert 1 / 1.5 <= held["lr_ratio"] <= 1.5 and held["lr_inside"]
    md = law_markdown(data)
    assert "lr: pooled" in md and "line through the budgets' own optima" in md
    assert "the held-out one joined them after its check" in md
    assert "inside the band predicted for it" in md and "missed its own check" not in md
    store = optuna.storages.RDBStorage(url)
    law = fit_law(spec, budget_studies(spec, store)).study_law()
    assert law is not None and law.method == "pooled"
    args, name = load_target("deepseek-v3-671b")
    # fitted at one batch: its LR is written only when accepted as measured at that batch
    # (tests/tuner/test_export_lr_at_batch.py: refused otherwise)
    target = FullRunTarget(model_args=args, name=name, hardware=get_hardware("h800"),
                           gpus=2048, tokens=int(14.8e12), seq_len=4096, lr_at_fitted_batch=True)
    largest = budget_studies(spec, store)[-1][1]
    warned = "do not lie on one power law"
    full, _ = export_study(largest, Pick(kind="best-loss"), target, law=law)
    assert not any(warned in w for w in full.warnings)
    bent = dataclasses.replace(law, lack_of_fit_p=0.001)
    full, _ = export_study(largest, Pick(kind="best-loss"), target, law=bent)
    assert any(warned in w and "p = 0.001" in w for w in full.warnings)


def test_the_held_out_budget_joins_the_law_only_once_its_search_has_ended(law_at_one_batch):
    """Its check reads the prediction stored before it ran, whether or not it joined; a
    held-out search cut short (a crash, a cancel) leaves the laws as the fitted budgets made
    them; a check the law misses is said in law.md and warned at export."""
    import optuna

    from reports.laws.law import law_markdown
    from tuner.export.export import missed_check_warnings
    from tuner.study.workflows.law_fit import budget_studies, fit_law

    spec, url = law_at_one_batch
    studies = budget_studies(spec, optuna.storages.RDBStorage(url))
    whole = fit_law(spec, studies)
    below = fit_law(spec, studies[:4])
    assert whole.held_out_in_law and not below.held_out_in_law
    assert [b.index for b in whole.fitted] == [0, 1, 2, 3, 4]
    assert whole.lr_law.x_max == pytest.approx(2_621_440)
    assert below.lr_law.x_max == pytest.approx(524_288)
    check = whole.held_out_check()
    assert check["lr_predicted"] == below.predict(2_621_440)["lr"]  # made before it ran

    # the held-out study with 5 of its 9 trials, or with its last one killed mid-run (a FAIL
    # marked interrupted, which resume re-runs): not ended, so not in the law, checked anyway
    from tuner.study.run.resume import INTERRUPTED
    from tuner.study.store import records

    last = studies[4][1].trials[8]
    killed = optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, params=last.params,
        distributions=last.distributions, user_attrs={records.REASON: INTERRUPTED})
    for held_trials in (studies[4][1].trials[:5], studies[4][1].trials[:8] + [killed]):
        mem = optuna.storages.InMemoryStorage()
        cut = []
        for i, study in studies:
            copy = optuna.create_study(storage=mem, study_name=study.study_name,
                                       directions=study.directions)
            for key, value in study.user_attrs.items():
                copy.set_user_attr(key, value)
            copy.add_trials(study.trials if i < 4 else held_trials)
            cut.append((i, copy))
        partial = fit_law(spec, cut)
        assert not partial.held_out_in_law
        assert partial.lr_law.x_max == pytest.approx(524_288)
        assert partial.lr_law.at(1e6) == pytest.approx(below.lr_law.at(1e6))

    missed = check | {"lr_inside": False, "lr_measured": check["lr_predicted"] * 3,
                      "lr_ratio": 1 / 3}
    (warning,) = missed_check_warnings(missed)
    assert "missed its own held-out check" in warning and "2621440-token" in warning
    assert f"{missed['lr_measured']:.3g}" in warning and "0.33x" in warning
    assert missed_check_warnings(check) == []
    md = law_markdown(whole.to_dict() | {"held_out_check": missed, "full_run": None,
                                         "mup": False})
    assert "The law missed its own check" in md and "the lr optimum" in md


def test_a_held_out_budget_off_the_law_does_not_cost_the_smallest_budgets():
    """Joined after its check, a held-out budget whose optimum sits 3x off the law makes one
    power law fail over all 5 budgets; which small budgets are left out is decided without it
    (they bend first; a misfit at the top is the check's to say), so all 4 fitted budgets stay
    and the joined law's p reports the misfit. Left to the trimming, the misfit would have
    dropped budgets from the bottom, the lever arm the law rests on."""
    from tuner.study.workflows.law_fit import BudgetResult, _pooled

    rng = np.random.default_rng(7)
    lrs, losses = trials(rng, sd=0.03)
    x = math.log10(3e-4) + (rng.permutation(8) + rng.random(8)) / 8 * math.log10(6e-2 / 3e-4)
    lrs.append(10 ** x)
    losses.append(2.0 + 0.2 * (x - math.log10(3 * LR_HELD)) ** 2 + rng.normal(0.0, 0.03, 8))
    tokens = TOKENS + [HELD]
    budgets = [BudgetResult(index=i, study=f"b{i}", tokens=t, compute=float(t), held_out=i == 4,
                            n_trials=8, optimum=None, error="", best={}, noise_sd=None,
                            predicted_trial={}, finished=True,
                            trials=tuple((lr, 256.0, z) for lr, z in zip(lrs[i], losses[i])))
               for i, t in enumerate(tokens)]
    pooled, used, left_out = _pooled(budgets, lambda b: b.tokens, 0)
    assert used == (0, 1, 2, 3, 4) and left_out == ()
    assert pooled.lack_of_fit_p < 0.05  # the misfit is reported
    trimmed_by_it = fit_pooled_law(tokens, lrs, losses, n_boot=1)
    assert trimmed_by_it.left_out  # what the held-out budget would otherwise have cost
