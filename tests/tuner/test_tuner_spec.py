from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tuner.study.run.preflight import spec_warnings
from tuner.study.specs.spec import SpecError, StudySpec, load_spec, spec_from_dict

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "search_spaces" / "quickstart.toml"
SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}}


def base() -> dict:
    return {"study": {"name": "s1"}, "space": copy.deepcopy(SPACE)}


def with_(path: str, value) -> dict:
    d = base()
    *sections, key = path.split(".")
    node = d
    for s in sections:
        node = node.setdefault(s, {})
    node[key] = value
    return d


BAD = [
    ({**base(), "studdy": {}}, ["spec", "unknown key", "studdy", "study"]),
    ({"space": SPACE}, ["study", "required"]),
    ({"study": {"name": "x"}}, ["space", "required"]),
    (with_("study.name", ""), ["study.name", "folder"]),
    (with_("study.name", "../etc"), ["study.name", "../etc"]),
    (with_("study.name", 3), ["study.name", "string", "3"]),
    (with_("study.nme", "x"), ["study", "unknown key", "nme", "n_trials"]),
    (with_("study.n_trials", 0), ["study.n_trials", ">= 1", "0"]),
    (with_("study.n_trials", 2.5), ["study.n_trials", "integer", "2.5"]),
    (with_("study.n_trials", True), ["study.n_trials", "integer", "True"]),
    (with_("study.max_concurrent", 0), ["study.max_concurrent", ">= 1"]),
    (with_("study.seed", -1), ["study.seed", "[0, 2**32)"]),
    (with_("study.seed", 2**70), ["study.seed", "[0, 2**32)"]),  # numpy's seeds are 32-bit
    (with_("study.sampler", "cmaes"), ["study.sampler", "tpe", "cmaes"]),
    (with_("study.startup_trials", 0), ["study.startup_trials", ">= 1", "auto", "0"]),
    (with_("study.startup_trials", 1.5), ["study.startup_trials", "integer", "1.5"]),
    (with_("study.storage", "redis://x"), ["study.storage", "URL", "redis://x"]),
    (with_("model.preset", "huge"), ["model.preset", "huge", "debug"]),
    (with_("model.size", "x"), ["model", "unknown key", "size", "preset"]),
    ({**base(), "model": {"preset": "debug", "full": "x.json"}}, ["model", "exactly one"]),
    ({**base(), "model": {"preset": "debug", "proxy": "proxy-s"}}, ["model.proxy", "full"]),
    ({**base(), "model": {"preset": "debug", "group_score": "mean"}},
     ["model.group_score", "must be one of", "mean"]),
    (with_("model.full", "/no/such.json"), ["model.full", "existing", "/no/such.json"]),
    (with_("data.vocab_size", -5), ["data.vocab_size", ">= 0", "-5"]),
    (with_("data.corpora", "x"), ["data", "unknown key", "corpus"]),
    (with_("budget.tokens_per_trial", 0), ["budget.tokens_per_trial", "> 0"]),
    (with_("budget.eval_every_tokens", 10**9), ["budget.eval_every_tokens", "tokens_per_trial"]),
    (with_("budget.tokens", 5), ["budget", "unknown key", "tokens_per_trial"]),
    (with_("objectives.val_los", "minimize"), ["objectives.val_los", "val_loss"]),
    (with_("objectives.val_loss", "min"), ["objectives.val_loss", "minimize", "min"]),
    ({**base(), "objectives": {}}, ["objectives", "at least one"]),
    (with_("constraints.max_bogus", 1.0), ["constraints.max_bogus", "max_<metric>"]),
    (with_("constraints.max_peak_memory_gb", "4"), ["constraints.max_peak_memory_gb", "'4'"]),
    (with_("constraints.max_peak_memory_gb", float("nan")), ["finite", "nan"]),
    (with_("pruning.scheduler", "hyperband"), ["pruning.scheduler", "asha", "hyperband"]),
    (with_("pruning.grace_tokens", 0), ["pruning.grace_tokens", "0"]),
    (with_("pruning.reduction_factor", 1), ["pruning.reduction_factor", "> 1"]),
    (with_("pruning.reduction_factor", float("inf")), ["pruning.reduction_factor", "finite"]),
    (with_("resources.cpus_per_trial", 0), ["resources.cpus_per_trial", ">= 0.01"]),
    (with_("resources.gpus_per_trial", -1), ["resources.gpus_per_trial", ">= 0"]),
    (with_("resources.gpu", 1), ["resources", "unknown key", "gpus_per_trial"]),
    ({**base(), "space": {"file": "deepseek_v3.toml", **SPACE}}, ["space", "not both"]),
    ({**base(), "space": {"file": "nope.toml"}}, ["space.file", "nope.toml", "deepseek_v3"]),
    ({**base(), "space": {"file": 3}}, ["space.file", "string"]),
    ({**base(), "space": {"params": {"lr": {"type": "float", "low": 1, "high": 0}}}},
     ["space.params.lr", "low <= high"]),
    ({**base(), "study": "s1"}, ["study", "table"]),
    (with_("data.corpus", "/no/such/corpus.txt"),
     ["data.corpus", "does not exist", "/no/such/corpus.txt"]),
    (with_("data.vocab_size", 1000), ["data.vocab_size", "256", "1000"]),
    ({**with_("budget.tokens_per_trial", 20), "space": {**SPACE, "fixed": {"seq_len": 32}}},
     ["budget.tokens_per_trial", "one sequence", "seq_len=32", "20"]),
    ({**base(), "space": {"params": {"warmup_fraction": {"type": "float", "low": 0.5,
                                                         "high": 2.0}}}},
     ["space.params.warmup_fraction.high", "[0, 1]", "2.0"]),
]


@pytest.mark.parametrize(("table", "words"), BAD, ids=[w[0] + str(i) for i, (_, w) in
                                                        enumerate(BAD)])
def test_bad_spec_is_rejected_with_field_rule_and_value(table, words):
    with pytest.raises(SpecError) as e:
        spec_from_dict(table)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_defaults_debug_preset_stdlib_corpus_val_loss():
    s = spec_from_dict(base())
    assert (s.model.preset, s.data.corpus) == ("debug", "stdlib")
    assert s.objectives == (("val_loss", "minimize"),)
    assert s.study.storage == ""


def test_spec_is_frozen_and_round_trips_with_space_inline():
    s = load_spec(QUICKSTART)
    with pytest.raises(AttributeError):
        s.study.name = "x"  # type: ignore[misc]
    d = s.to_dict()
    assert "file" not in d["space"] and "params" in d["space"]
    assert StudySpec.from_dict(d) == s


def test_space_file_is_found_in_search_spaces_and_relative_to_the_spec(tmp_path: Path):
    (tmp_path / "mine.toml").write_text(
        '[params.lr]\ntype = "float"\nlow = 0.001\nhigh = 0.01\n')
    spec = tmp_path / "s.toml"
    spec.write_text('[study]\nname = "x"\n[space]\nfile = "mine.toml"\n')
    assert load_spec(spec).space.names() == ("lr",)
    spec.write_text('[study]\nname = "x"\n[space]\nfile = "deepseek_v3.toml"\n')
    assert "batch_schedule" in load_spec(spec).space.names()


def test_overrides_and_file_errors(tmp_path: Path):
    assert load_spec(QUICKSTART, overrides={"study.name": "other"}).name == "other"
    with pytest.raises(SpecError, match="existing file"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[study\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)


def test_constraint_forms():
    s = spec_from_dict({**base(), "constraints": {"max_vio": 0.5, "max_peak_memory_gb": 4,
                                                  "min_tokens_per_s": 1000}})
    assert s.constraints == (("max_vio", 0.5), ("max_peak_memory_gb", 4.0),
                             ("min_tokens_per_s", 1000.0))


def test_a_load_dependent_objective_or_constraint_gets_a_warning():
    assert spec_warnings(spec_from_dict(base())) == []
    assert spec_warnings(load_spec(QUICKSTART)) == []  # its modeled cost measures no load
    assert spec_warnings(spec_from_dict({**base(), "objectives": {
        "timed_tokens_per_s": "maximize"}, "constraints": {"min_timed_tokens_per_s": 1e3}})) == []
    s = spec_from_dict({**base(), "objectives": {"val_loss": "minimize",
                                                 "tokens_per_s": "maximize"},
                        "constraints": {"max_train_time_s": 60, "max_vio": 0.5}})
    warnings = spec_warnings(s)
    assert len(warnings) == 2
    assert warnings[0].startswith("objective tokens_per_s")
    assert warnings[1].startswith("constraint train_time_s")
    assert all("measures the load" in w for w in warnings)


def test_unset_intervals_follow_a_small_budget():
    """Shrinking tokens_per_trial alone must not trip over the 50k defaults."""
    spec = spec_from_dict(with_("budget.tokens_per_trial", 20_000))
    assert spec.budget.eval_every_tokens == 5_000
    assert spec.pruning.grace_tokens == 5_000
    explicit = with_("budget.tokens_per_trial", 20_000)
    explicit["pruning"] = {"grace_tokens": 30_000}
    with pytest.raises(SpecError, match=r"pruning.grace_tokens.*30000"):
        spec_from_dict(explicit)  # a value the user wrote is still checked, not adjusted


# -- [full_run]: the full run the modeled metrics cost and export defaults to ------------------

FULL_RUN_BAD = [
    (with_("full_run.hardware", "h900"), ["full_run.hardware", "one of", "h800", "h900"]),
    (with_("full_run.gpus", 0), ["full_run.gpus", "positive integer", "0"]),
    (with_("full_run.tokens", 1.5), ["full_run.tokens", "integer", "1.5"]),
    (with_("full_run.tokens", -1), ["full_run.tokens", "positive whole number", "-1"]),
    # the limits of `moetune export --gpus` (tuner.modeling.full_run.FullRunLimits)
    (with_("full_run.gpus", 2**21), ["full_run.gpus", "at most 1048576", "2097152"]),
    (with_("full_run.target", "proxy-xl"), ["full_run.target", "deepseek-v3-671b", "proxy-xl"]),
    (with_("full_run.nodes", 4), ["full_run", "unknown key", "nodes", "gpus"]),
    (with_("objectives.full_gpu_hours", "minimize"),
     ["objectives.full_gpu_hours", "needs [model] full", "[full_run] target"]),
]


@pytest.mark.parametrize(("table", "words"), FULL_RUN_BAD)
def test_bad_full_run_section_names_field_rule_and_value(table, words):
    with pytest.raises(SpecError) as e:
        spec_from_dict(table)
    for w in words:
        assert w in str(e.value)


def test_full_run_section_is_parsed_and_stored():
    d = base() | {"full_run": {"target": "proxy-l", "hardware": "h200", "gpus": 256,
                               "tokens": 2e12, "seq_len": 8192},
                  "objectives": {"val_loss": "minimize", "full_gpu_hours": "minimize"}}
    spec = spec_from_dict(d)
    assert spec.full_run.tokens == 2_000_000_000_000 and isinstance(spec.full_run.tokens, int)
    assert (spec.full_run.hardware, spec.full_run.gpus, spec.full_run.seq_len) == ("h200", 256,
                                                                                  8192)
    assert spec.full_run_target == "proxy-l"
    assert spec_from_dict(spec.to_dict()) == spec  # as resume reads it back


def test_full_run_target_may_name_a_published_config():
    spec = load_spec(QUICKSTART)
    assert spec.full_run_target == "deepseek-v3-671b"
    assert dict(spec.objectives) == {"val_loss": "minimize", "full_gpu_hours": "minimize"}


def test_full_run_defaults_to_deepseek_v3s_run():
    spec = spec_from_dict(base())
    f = spec.full_run
    assert (f.hardware, f.gpus, f.tokens, f.seq_len) == ("h800", 2048, 14_800_000_000_000, 4096)
    assert "full_run" not in spec.to_dict() or spec.to_dict()["full_run"].get("target") is None


def test_modeled_metrics_follow_the_full_run_section():
    """Twice the GPUs at the same tokens: about the same GPU-hours, less memory per GPU."""
    from types import SimpleNamespace

    from trainers import Recipe, preset
    from tuner.study.specs.metrics import MetricContext, get_metric

    def cost(gpus: int) -> tuple[float, float]:
        spec = spec_from_dict(base() | {"full_run": {"target": "proxy-l", "gpus": gpus,
                                                     "tokens": 1e11}})
        ctx = MetricContext(spec=spec, recipe=Recipe(), model_args=preset("debug"))
        result = SimpleNamespace(token_budget=200_000)
        return (get_metric("full_peak_memory_gb").fn(result, ctx),
                get_metric("full_gpu_hours").fn(result, ctx))

    (mem8, hours8), (mem16, hours16) = cost(8), cost(16)
    assert mem16 < mem8
    assert hours16 == pytest.approx(hours8, rel=0.05)


def test_a_storage_password_stays_in_memory():
    """The stored spec, spec.json and the run summary carry the URL with its password masked."""
    import json

    spec = spec_from_dict(with_("study.storage", "postgresql://tester:S3cretPW@db.example/moe"))
    assert spec.study.storage.endswith(":S3cretPW@db.example/moe")  # what the driver connects with
    stored = json.dumps(spec.to_dict())
    assert "S3cretPW" not in stored and "postgresql://tester:***@db.example/moe" in stored
    assert spec_from_dict(spec.to_dict()).to_dict() == spec.to_dict()  # resume compares these


def test_model_group_score_reaches_the_proxy():
    from tuner.study.specs.proxy import resolve_model_args
    spec = spec_from_dict({**base(), "model": {"preset": "proxy-s", "group_score": "sum_top2"}})
    assert resolve_model_args(spec).group_rule == "sum_top2"
    assert resolve_model_args(spec_from_dict(base())).group_score == "auto"



@pytest.mark.parametrize("extra, kind", [
    ({}, "study"),
    ({"law": {"tokens": [1000, 4000, 16000, 64000]}}, "law"),
    ({"law": {"tokens": [1000, 4000, 16000, 64000], "budget": 1}}, "study"),  # one budget
    ({"ladder": {"widths": [32, 64]}}, "ladder"),
    ({"ladder": {"widths": [32, 64], "rung": 1}}, "study"),     # one rung of a ladder
])
def test_a_spec_says_what_it_runs(extra, kind):
    """`StudySpec.kind`, the one place that says whether a spec is a whole law, a whole ladder
    or one study (the command line and the service's driver both ask it)."""
    assert spec_from_dict({**base(), **extra}).kind == kind
