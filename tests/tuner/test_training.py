"""The one training call: `Training` (what a worker receives) and `run_training` (threads, device,
corpus, the trainer with the cores gate, one error policy)."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.utils.specs import minimal_spec
from trainers import Recipe, preset
from tuner import testing
from tuner.study.run.runner import _job
from tuner.study.specs.spec import DataSection
from tuner.study.trial.training import Training, device_for, run_training

ROOT = Path(__file__).resolve().parents[2]
SECRET_URL = "postgresql://ops:s3cret@db.example:5432/moetune"


def training(**overrides) -> Training:
    base = Training(model_args=preset("debug").to_dict(), recipe=Recipe(seq_len=64).to_dict(),
                    data=DataSection(), token_budget=300, seed=1, eval_every_tokens=100,
                    cpus=1, gpus=0)
    return dataclasses.replace(base, **overrides)


def study_spec(**study):
    return minimal_spec("one", study={"n_trials": 2, "max_concurrent": 2, **study},
                        space={"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2}},
                               "fixed": {"seq_len": 64}})


def test_a_training_has_no_field_for_a_storage_url_or_a_secret():
    """Its fields are these and no more: a field holding the spec or its [study] section (where
    the storage URL lives) would let a password travel to the workers."""
    fields = {f.name: f.type for f in dataclasses.fields(Training)}
    assert fields == {"model_args": "dict[str, Any]", "recipe": "dict[str, Any]",
                      "data": "DataSection", "token_budget": "int", "seed": "int",
                      "eval_every_tokens": "int | None", "cpus": "float | None",
                      "gpus": "float", "device": "str"}
    assert {f.name for f in dataclasses.fields(DataSection)} == {
        "corpus", "vocab_size", "max_corpus_gb", "tokenizer", "text_field", "eod_token"}


def test_what_a_study_sends_its_trials_carries_no_storage_url():
    s = study_spec(storage=SECRET_URL)
    assert b"s3cret" in pickle.dumps(s)  # the spec itself would carry it
    job = _job(s, SimpleNamespace(model_args=preset("debug")))
    assert type(job) is Training and b"s3cret" not in pickle.dumps(job)
    assert (job.data, job.token_budget, job.seed, job.cpus, job.gpus) == (
        s.data, 300, s.study.seed, s.resources.cpus_per_trial, s.resources.gpus_per_trial)


def test_a_training_runs_with_its_threads_device_seed_and_the_cores_gate():
    seen = {}

    def recording(model_args, recipe, **kw):
        seen.update(kw, threads=torch.get_num_threads(), lr=recipe.lr, dim=model_args.dim)
        return testing.quick_train(model_args, recipe, **kw)

    before = torch.get_num_threads()
    trained = run_training(training(cpus=1.7, recipe=Recipe(seq_len=64, lr=2e-3).to_dict()),
                           trainer=recording)
    assert trained.status == "ok" and trained.result.val_loss > 0 and trained.error == ""
    assert torch.get_num_threads() == before  # put back
    assert seen["threads"] == 1 and seen["device"] == "cpu" == trained.device
    assert (seen["seed"], seen["token_budget"], seen["eval_every_tokens"]) == (1, 300, 100)
    assert seen["lr"] == 2e-3 and seen["dim"] == preset("debug").dim
    assert callable(seen["step_gate"]) and "on_eval" not in seen  # None: not passed
    assert trained.corpus_hash == seen["data"].hash


def test_the_device_rule():
    assert device_for(training(gpus=0)) == "cpu"
    assert device_for(training(gpus=1)) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert device_for(training(gpus=0, device="meta")) == "meta"


@pytest.mark.parametrize("trainer, status, kind, error", [
    (testing.oom_train, "oom", "out_of_memory", "OutOfMemoryError: "),
    (testing.cpu_oom_train, "oom", "out_of_memory", "RuntimeError: "),
    (testing.error_train, "error", "exception", "ValueError: "),
])
def test_a_failure_is_recorded_never_swallowed(trainer, status, kind, error):
    trained = run_training(training(), trainer=trainer)
    assert (trained.status, trained.reason.kind, trained.result) == (status, kind, None)
    assert trained.error.startswith(error) and len(trained.error) <= 300
    with pytest.raises(type(trained.exception)) as raised:
        trained.result_or_raise()  # rerun and validate raise it, as before
    assert raised.value is trained.exception


def test_a_bad_corpus_is_recorded_with_its_spec_field():
    trained = run_training(training(data=DataSection(corpus="/nonexistent/corpus")),
                           trainer=testing.quick_train)
    assert trained.status == "error" and trained.corpus_hash is None
    assert trained.error.startswith("SpecError: data.corpus")


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_ctrl_c_and_exit_pass_through_and_the_threads_are_put_back(stop):
    def stopping(model_args, recipe, **kw):
        raise stop()

    before = torch.get_num_threads()
    with pytest.raises(stop):
        run_training(training(cpus=1), trainer=stopping)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("field, value", [("token_budget", 0), ("cpus", 0), ("gpus", -1)])
def test_bad_values_name_their_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: "):
        training(**{field: value})


def test_only_the_training_call_assembles_a_training():
    """`cores.gate_for` (the trainer's step gate), `load_data` and `torch.set_num_threads` are
    called by `run_training` alone among the modules that train (the spec's input check loads
    the corpus too, and a timing probe gates itself exclusively)."""
    calls: dict[str, set[str]] = {}
    for path in (ROOT / "tuner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).rsplit(".", 1)[-1]
                if name in {"gate_for", "set_num_threads", "load_data"}:
                    calls.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    home = "tuner/study/trial/training.py"
    assert calls["gate_for"] == {home}
    assert calls["set_num_threads"] == {home}
    assert calls["load_data"] == {home, "tuner/study/specs/data_spec.py"}


def test_a_trial_and_its_noise_re_training_are_built_alike():
    """One builder (`study_training`): a noise re-training differs from the study's trials in
    the recipe and the seed it is given, in nothing else."""
    from tuner.study.run.noise_retrain import training_of

    spec = study_spec(seed=7)
    shared = _job(spec, SimpleNamespace(model_args=preset("debug")))
    record = SimpleNamespace(model_args_dict=shared.model_args, recipe_dict={"lr": 1e-3})
    again = training_of(record, 11, spec)
    assert dataclasses.replace(again, recipe={}, seed=spec.study.seed) == shared
    assert (again.recipe, again.seed) == ({"lr": 1e-3}, 11)
    assert (shared.token_budget, shared.eval_every_tokens, shared.cpus) == (300, 100, 1.0)


def test_only_the_builder_and_validate_make_a_training():
    """`Training(...)` is built in `training.study_training`, and in `validate` (a widened model
    at its own budget in the command's process), nowhere else."""
    made = set()
    for path in (ROOT / "tuner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Training":
                made.add(str(path.relative_to(ROOT)))
    assert made == {"tuner/study/trial/training.py", "tuner/study/workflows/validate.py"}
