"""A ladder of widths: its spec, promotion, the rung studies in one storage, the sampler learning
from lower rungs, resume, and the transfer report (fake trainers: seconds, not minutes)."""

from __future__ import annotations

import math

import optuna
import pytest

from tuner import testing
from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.spec import SpecError, spec_from_dict
from tuner.study.store import records
from tuner.study.workflows.ladder import promote, rung_spec
from tuner.study.workflows.stage_runner import run_stages

SPACE = {"params": {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
    "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2}}}
TOKENS = 4 * 128


def ladder_table(name: str = "lad", n: int = 9, **ladder) -> dict:
    return {"study": {"name": name, "n_trials": n, "max_concurrent": 2, "sampler": "random",
                      "seed": 0},
            "budget": {"tokens_per_trial": TOKENS, "eval_every_tokens": TOKENS},
            "space": SPACE, "ladder": {"widths": [32, 64, 128]} | ladder}


@pytest.mark.parametrize("ladder, field, rule", [
    ({"widths": [64]}, "ladder.widths", "at least 2"),
    ({"widths": [64, 64]}, "ladder.widths", "must increase"),
    ({"widths": [4, 64]}, "ladder.widths", ">= 8"),
    ({"promote": 1.5}, "ladder.promote", "(0, 1]"),
    ({"mup": "yes"}, "ladder.mup", "true or false"),
    ({"top_noise": 0}, "ladder.top_noise", "true or false"),
    ({"proposals": -1}, "ladder.proposals", ">= 0"),
    ({"rung": 3}, "ladder.rung", "[0, 2]"),
    ({"ladders": 1}, "ladder", "unknown key(s) ['ladders']"),
])
def test_bad_ladder_values_name_the_field_and_rule(ladder, field, rule):
    with pytest.raises(SpecError) as e:
        spec_from_dict(ladder_table(**ladder))
    assert str(e.value).startswith(field) and rule in str(e.value)


def test_a_name_too_long_for_the_rung_suffix_is_refused():
    with pytest.raises(SpecError, match="study.name: must leave room"):
        spec_from_dict(ladder_table(name="x" * 62))


def test_rung_specs_set_width_mup_and_the_link_below():
    from tuner.study.specs.proxy import resolve_model_args

    spec = spec_from_dict(ladder_table())
    bottom = rung_spec(spec, 0, [])
    top = rung_spec(spec, 2, [(4, {"lr": 1e-3}), (7, {"warmup_fraction": 0.1})])
    assert bottom.name == "lad" and top.name == "lad.w128" == rung_name("lad", (32, 64, 128), 2)
    assert (resolve_model_args(bottom).dim, resolve_model_args(top).dim) == (32, 128)
    assert resolve_model_args(top).mup_base_dim == 32 and resolve_model_args(top).width_mult == 4
    assert top.study.n_trials == 2 and top.ladder.promoted == (4, 7)
    assert top.start.enqueue == ({"lr": 1e-3}, {"warmup_fraction": 0.1})
    assert top.start.warm_start == "lad.w64"
    off = spec_from_dict(ladder_table(mup=False))
    assert resolve_model_args(rung_spec(off, 2, [(0, {"lr": 1e-3})])).mup_base_dim == 0
    # noise: every rung measures it, unless top_noise = false spares the top rung
    noisy = spec_from_dict(ladder_table() | {"study": {"name": "lad", "n_trials": 9,
                                                       "noise_repeats": 2}})
    assert [rung_spec(noisy, i, [(0, {"lr": 1e-3})]).study.noise_repeats
            for i in range(3)] == [2, 2, 2]
    quiet = spec_from_dict(ladder_table(top_noise=False) | {
        "study": {"name": "lad", "n_trials": 9, "noise_repeats": 2}})
    assert [rung_spec(quiet, i, [(0, {"lr": 1e-3})]).study.noise_repeats
            for i in range(3)] == [2, 2, 0]
    # a rung's stored spec reads back as the same rung
    assert spec_from_dict(top.to_dict()).to_dict() == top.to_dict()


def synthetic(values, *, sd=None, directions=("minimize",)):
    study = optuna.create_study(directions=list(directions))
    study.set_metric_names(["val_loss", "peak_memory_gb"][:len(directions)])
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    for i, v in enumerate(values):
        study.add_trial(optuna.trial.create_trial(
            params={"lr": 1e-3 * (i + 1)}, distributions=dist,
            values=list(v) if isinstance(v, tuple) else [v]))
    if sd is not None:
        study.set_user_attr(records.NOISE, {"sd": sd, "n": 6})
    return study


def test_promotion_keeps_ties_within_the_noise_together():
    values = [3.0, 2.0, 2.5, 2.01, 2.9, 2.6]
    assert [n for n, _ in promote(synthetic(values), 1 / 3)] == [1, 3]
    # #2 (2.5) is within 0.5 of the cut (2.01): it climbs with them; #5 (2.6) does not
    assert [n for n, _ in promote(synthetic(values, sd=0.5), 1 / 3)] == [1, 3, 2]
    assert [n for n, _ in promote(synthetic(values), 0.01)] == [1]  # at least one
    assert promote(synthetic(values), 1 / 3)[0][1] == {"lr": 2e-3}


def test_promotion_with_several_objectives_keeps_whole_ranks():
    # rank 0: #0, #1, #2 (a front); rank 1: #3; k = ceil(0.25 * 4) = 1 -> all of rank 0
    values = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0), (3.0, 3.0)]
    got = promote(synthetic(values, directions=("minimize", "minimize")), 0.25)
    assert sorted(n for n, _ in got) == [0, 1, 2]


def test_a_ladder_runs_its_rungs_in_one_storage_and_resumes(ray_session, tmp_path):
    from tuner.study.run.runner import run_study

    spec = spec_from_dict(ladder_table())
    run_dir = tmp_path / "runs" / "lad"
    # the bottom rung alone first (as if the driver died after it) ...
    run_study(rung_spec(spec, 0, []), run_dir=run_dir, trainer=testing.width_train,
              progress=False)
    # ... then the ladder: the bottom is resumed, not re-run; the rest climbs
    rungs = run_stages(spec, run_dir=run_dir, trainer=testing.width_train, progress=False)
    assert [s.name for s in rungs] == ["lad", "lad.w64", "lad.w128"]
    assert [s.done for s in rungs] == [9, 3, 1]
    url = f"sqlite:///{run_dir / 'study.db'}"
    assert set(optuna.get_all_study_names(url)) == {"lad", "lad.w64", "lad.w128"}
    low = optuna.load_study(study_name="lad", storage=url)
    mid = optuna.load_study(study_name="lad.w64", storage=url)
    assert len(low.trials) == 9  # resumed, nothing added
    best3 = sorted((t for t in low.trials), key=lambda t: t.values[0])[:3]
    own = [t for t in mid.trials if not str(t.user_attrs.get(records.ORIGIN, "")).startswith(
        records.WARM_START)]
    warm = [t for t in mid.trials if t not in own]
    assert len(warm) == 9  # the sampler saw the whole rung below
    assert sorted(t.params["lr"] for t in own) == sorted(t.params["lr"] for t in best3)
    from tuner.study.store.storage import stored_spec
    assert sorted(stored_spec(mid).ladder.promoted) == sorted(t.number for t in best3)
    # wider is better in this fake: the top rung's value is below its candidate's at the bottom
    top = optuna.load_study(study_name="lad.w128", storage=url)
    assert top.best_value < min(t.values[0] for t in low.trials)

    from reports.laws.ladder import ladder_data, write_ladder_report
    data = ladder_data(spec, url)
    assert [r["width"] for r in data["rungs"]] == [32, 64, 128]
    assert [r["trials"] for r in data["rungs"]] == [9, 3, 1]
    assert data["transfers"][0]["n"] == 3 and data["transfers"][1]["n"] == 1
    # µP on: the fake's lr optimum does not move, so the order carries over exactly
    assert data["transfers"][0]["rho"] == pytest.approx(1.0)
    paths = write_ladder_report(spec, url=url, out=tmp_path / "ladder")
    md = paths["ladder_md"].read_text()
    assert "lad.w64 → lad.w128: ρ = n/a (n = 1)" in md
    assert "moetune export lad --target" in md and paths["ladder_png"].stat().st_size > 0


def test_upper_rung_proposals_change_with_lower_rung_results(ray_session, tmp_path):
    """The sampler learns from the rung below: with the same seed and candidates, the trial it
    proposes at rung 1 differs when rung 0's results differ."""
    def proposed(trainer, folder):
        spec = spec_from_dict(ladder_table(n=8, widths=[32, 64], proposals=1) | {
            "study": {"name": "prop", "n_trials": 8, "max_concurrent": 1, "sampler": "tpe",
                      "seed": 0, "startup_trials": 2}})
        run_stages(spec, run_dir=tmp_path / folder / "prop", trainer=trainer, progress=False)
        upper = optuna.load_study(study_name="prop.w64",
                                  storage=f"sqlite:///{tmp_path / folder / 'prop' / 'study.db'}")
        fresh = [t for t in upper.trials if not t.user_attrs.get(records.ORIGIN)]
        assert len(fresh) == 1
        return fresh[0].params

    a = proposed(testing.width_train, "a")
    b = proposed(testing.quick_train, "b")
    assert a != b and all(math.isfinite(v) for v in a.values())


LADDER_TOML = """
[study]
name = "cli-lad"
n_trials = 6
max_concurrent = 2
sampler = "random"
[budget]
tokens_per_trial = 512
eval_every_tokens = 512
[ladder]
widths = [32, 64]
promote = 0.33
[space.params.lr]
type = "float"
low = 1e-4
high = 3e-2
log = true
"""


def test_the_cli_runs_reports_resumes_and_exports_a_ladder(ray_session, tmp_path, capsys):
    from tuner.app.cli import main

    spec, root = tmp_path / "lad.toml", tmp_path / "runs"
    spec.write_text(LADDER_TOML)
    fake = ["--trainer", "tuner.testing:width_train", "--no-progress"]
    assert main(["submit", str(spec), "--root", str(root), *fake]) == 0
    out = capsys.readouterr().out
    assert "rung 0 (width 32): study cli-lad: 6/6 trials done" in out
    assert "rung 1 (width 64): study cli-lad.w64: 2/2 trials done" in out
    assert (root / "cli-lad" / "ladder" / "ladder.md").is_file()
    assert (root / "cli-lad.w64" / "report" / "ranked.md").is_file()  # the answer's report
    # a resume of a finished ladder runs nothing more and says the same
    assert main(["resume", "cli-lad", "--root", str(root), *fake]) == 0
    assert "rung 1 (width 64): study cli-lad.w64: 2/2 trials done" in capsys.readouterr().out
    # export of the ladder is its top rung's answer, with the width it was measured at
    rc = main(["export", "cli-lad", "--root", str(root), "--target", "deepseek-v3-671b",
               "--gpus", "2048", "--tokens", "14.8e12", "--format", "megatron"])
    err = capsys.readouterr().err
    assert rc == 0 and "the answer is its top rung cli-lad.w64, measured at width 64" in err
    assert main(["report", "cli-lad", "--root", str(root)]) == 0
    assert "ladder.md" in capsys.readouterr().out
    # with --out, the ladder's report goes inside the folder named, not beside it
    assert main(["report", "cli-lad", "--root", str(root), "--out", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "ladder" / "ladder.md").is_file()
    assert not (tmp_path / "ladder").exists()
