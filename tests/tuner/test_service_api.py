"""The service's API as a client sees it, in process (`inprocess_service`): its app, scheduler
and drivers are the real ones, the trials fake trainers run in threads, with no Ray and no server
process. test_service.py runs the same service as a real `moetune serve` process with Ray.

Cancel and resume with nothing lost; bad input refused with the field named and nothing created;
the dashboard read-only; delete keeps what the service did not make; a law's every budget and a
ladder's every rung run by the study's driver."""

from __future__ import annotations

import json
import time

import optuna
import pytest
from inprocess_service import SPEC, InProcessService, inprocess_service
from optuna.trial import TrialState

from trainers.presets import PUBLISHED_CONFIGS
from tuner.study.store import records

LIVE = ("queued", "starting", "running")  # a just-accepted study's state, read after acceptance


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """Trials of ~3 s (`tuner.testing.slow_train`): a cancel finds one in flight."""
    with inprocess_service(tmp_path_factory.mktemp("service") / "root") as svc:
        yield svc


@pytest.fixture(scope="module")
def brisk(tmp_path_factory):
    """Trials of ~0.3 s (`inprocess_service.brisk_train`), for studies run to their end."""
    with inprocess_service(tmp_path_factory.mktemp("brisk") / "root",
                           trainer="inprocess_service:brisk_train") as svc:
        yield svc


def submit(service: InProcessService, name: str, n: int = 4) -> dict:
    status, body = service.call("POST", "/api/v1/studies",
                                {"spec": SPEC.format(name=name, n=n)})
    assert status == 201, body
    # the scheduler may pick the study up before the response is written: any live state is right
    assert body["state"] in LIVE and body["owner"] == "local"
    return body


def test_cancel_mid_study_then_resume_loses_nothing(service):
    submit(service, "cancel-me", n=6)
    service.wait_trials_running("cancel-me")
    status, body = service.call("POST", "/api/v1/studies/cancel-me/cancel")
    assert status == 200 and body["state"] == "stopping"
    d = service.wait_state("cancel-me", ("cancelled",))
    assert d["progress"]["running"] == 0 and d["progress"]["done"] < 6
    interrupted = [t for t in d["trials"] if t["reason"] == "interrupted"]
    assert interrupted  # the trials in flight, queued to be re-run on resume
    assert not [t for t in d["trials"] if t["outcome"] == "pruned"]  # never counted as done
    assert service.call("POST", "/api/v1/studies/cancel-me/cancel")[0] == 409  # nothing to stop


def test_cancelled_study_resumes_to_the_end(service):
    submit(service, "resumable", n=6)
    service.wait_state("resumable", ("running",))
    service.call("POST", "/api/v1/studies/resumable/cancel")
    service.wait_state("resumable", ("cancelled",))
    status, body = service.call("POST", "/api/v1/studies/resumable/resume")
    assert status == 200 and body["state"] in LIVE
    d = service.wait_state("resumable", ("finished",))
    assert d["progress"]["done"] == 6 and d["progress"]["running"] == 0
    status, _ = service.call("DELETE", "/api/v1/studies/resumable")
    assert status == 204
    assert service.call("GET", "/api/v1/studies/resumable")[0] == 404


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"spec": "[study\nname = 1"}, 422, ["spec", "not valid TOML"]),
    ({"spec": "[study]\nname = '../etc'\n[space.params.lr]\ntype='float'\nlow=1\nhigh=2"}, 422,
     ["study.name", "../etc"]),
    ({"spec": SPEC.format(name="x", n=0)}, 422, ["study.n_trials", ">= 1", "0"]),
    ({"spec": SPEC.format(name="x", n=2) + "[data]\ncorpus = 'rel/corpus.txt'\n"}, 422,
     ["data.corpus", "absolute path", "rel/corpus.txt"]),
    ({"spec": SPEC.format(name="x", n=2) + "[data]\ncorpus = '/no/such/corpus.txt'\n"}, 422,
     ["data.corpus", "/no/such/corpus.txt"]),
    ({"spec": SPEC.format(name="x", n=2).replace('[study]', "[study]\nstorage = "
                                                  "'postgresql://u:pw@h/db'")}, 422,
     ["study.storage", "must be empty"]),
    ({"spec": SPEC.format(name="x", n=2).replace("[space.params.lr]",
                                                  "[space]\nfile = '../x.toml'\n[space.p]")},
     422, ["space.file", "../x.toml"]),
    ({"spec": SPEC.format(name="x", n=2) + "[start]\nwarm_start = 'no-such-study'\n"}, 422,
     ["start.warm_start", "no-such-study", "the service's database"]),
    ({"spec": SPEC.format(name="x", n=2) + "[start]\nwarm_start = 'flow'\n"
      "warm_start_storage = 'postgresql://u:pw@h/db'\n"}, 422,
     ["start.warm_start_storage", "must be empty"]),
    ({"spec": SPEC.format(name="x", n=2) + "[law]\ntokens = [1, 2, 3, 4]\n"}, 422,
     ["law.tokens", "1.5 decades"]),
    ({"nope": 1}, 422, ["spec"]),
    # outside every data root: refused before anything reads the file
    ({"spec": SPEC.format(name="x", n=2) + "[data]\ncorpus = '/etc/passwd'\n"}, 422,
     ["data.corpus", "data root", "/etc/passwd"]),
    ({"spec": SPEC.format(name="x", n=2) + "[model]\nfull = '/etc/shadow'\n"}, 422,
     ["model.full", "data root"]),
    # were 500s: a seed numpy cannot take, a lone surrogate in the text
    ({"spec": SPEC.format(name="x", n=2).replace("[study]", "[study]\nseed = " + str(2**70))},
     422, ["study.seed", "[0, 2**32)"]),
    ({"spec": SPEC.format(name="x", n=2) + "# \ud800\n"}, 422, ["spec", "UTF-8"]),
    # seconds of the service's CPU in tomllib before: refused unparsed
    ({"spec": SPEC.format(name="x", n=2) + ".".join(["a"] * 5000) + " = 1\n"}, 422,
     ["spec", "dotted parts", "5000"]),
])
def test_bad_submissions_name_the_field_and_create_nothing(service, body, status, words):
    before = {s["name"] for s in service.call("GET", "/api/v1/studies")[1]}
    got, out = service.call("POST", "/api/v1/studies", body)
    assert got == status, out
    text = json.dumps(out)
    assert str(service.root) not in text  # no error shows where the service keeps its files
    for w in words:
        assert w in text
    assert {s["name"] for s in service.call("GET", "/api/v1/studies")[1]} == before


def test_oversized_and_unknown_requests(service):
    status, out = service.call("POST", "/api/v1/studies", raw=b"x" * (300 * 1024))
    assert status == 413 and "at most" in out["detail"]
    assert service.call("GET", "/api/v1/studies/no-such-study")[0] == 404
    assert service.call("GET", "/api/v1/studies/..%2Fetc")[0] == 404
    submit(service, "dup", n=2)
    status, out = service.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="dup", n=2)})
    assert status == 422 and out["field"] == "study.name"


def test_the_dashboard_is_mounted_read_only(service):
    status, page = service.call("GET", "/dashboard")
    assert status == 200 and "Optuna Dashboard" in page
    status, studies = service.call("GET", "/api/studies")  # the dashboard's own API: readable
    assert status == 200 and "study_summaries" in json.dumps(studies)
    status, out = service.call("POST", "/api/studies", {"study_name": "x",
                                                      "directions": ["minimize"]})
    assert status == 405 and "read-only" in out["detail"]
    assert service.call("DELETE", "/api/studies/0")[0] == 405


def test_bad_export_and_cancel_requests_name_the_field(service):
    if service.call("GET", "/api/v1/studies/exported")[0] == 404:
        submit(service, "exported", n=2)
    target = str(PUBLISHED_CONFIGS / "config_671B.json")
    for options, field in [({"gpus": "many"}, "--gpus"), ({"format": "yaml"}, "--format"),
                           ({"pick": "trial x"}, "--pick"), ({"root": "/"}, "--root"),
                           ({"colour": 1}, "--colour"), ({"gpus": None}, "--gpus")]:
        body = {"target": target, "gpus": 8, "tokens": 1e9} | options
        status, out = service.call("POST", "/api/v1/studies/exported/export", body)
        assert status == 422 and out["field"] == field, out
        assert out["detail"].startswith(field)
    status, out = service.call("POST", "/api/v1/studies/a%5Cb/cancel")
    assert status == 422 and out["field"] == "study", out
    status, out = service.call("DELETE", "/api/v1/studies/a%5Cb")
    assert status == 422 and out["field"] == "study", out
    assert service.call("POST", "/api/v1/studies/no-such-study/cancel")[0] == 404


def test_the_dashboard_shows_infeasible_trials_as_infeasible(service):
    """optuna-dashboard reads one `constraints` list; Optuna 5 stores a key per constraint. The
    dashboard's read-only view adds the list; the stored trial (what samplers read) is as was."""
    from tuner.app.service.web.dashboard import DashboardStorage, ReadOnlyStorage

    storage = optuna.storages.RDBStorage(f"sqlite:///{service.root / 'service.db'}")
    study = optuna.create_study(study_name="dash-constraints", storage=storage)
    trial = study.ask()
    trial.set_constraint("max_peak_memory_gb", 1.5)
    trial.set_constraint("diverged", -1.0)
    study.tell(trial, 2.0)
    stored = study.trials[0]
    view = DashboardStorage(storage)
    seen = view.get_all_trials(study._study_id)[0]
    assert sorted(seen.system_attrs["constraints"]) == [-1.0, 1.5]
    assert "constraints" not in storage.get_trial(stored._trial_id).system_attrs
    assert stored.constraints == {"max_peak_memory_gb": 1.5, "diverged": -1.0}
    with pytest.raises(ReadOnlyStorage):
        view.set_study_user_attr(study._study_id, "x", 1)
    status, body = service.call("GET", f"/api/studies/{study._study_id}?after=0")
    assert status == 200
    assert sorted(body["trials"][0]["constraints"]) == [-1.0, 1.5]  # 1.5 > 0: infeasible


def test_a_name_whose_folder_exists_is_refused_and_delete_keeps_what_it_did_not_make(brisk):
    cli = brisk.root / "cli-made"  # e.g. a study run with `moetune submit` in the same root
    cli.mkdir()
    (cli / "study.db").write_bytes(b"the CLI study's only copy")
    status, body = brisk.call("POST", "/api/v1/studies",
                               {"spec": SPEC.format(name="cli-made", n=1)})
    assert status == 422 and body["field"] == "study.name" and "folder" in body["detail"]
    assert brisk.call("GET", "/api/v1/studies/cli-made")[0] == 404  # nothing was created
    assert (cli / "study.db").read_bytes() == b"the CLI study's only copy"
    submit(brisk, "marked", n=1)
    brisk.wait_state("marked", ("finished",))
    (brisk.root / "marked" / "notes.txt").write_text("made by the service's study")
    assert brisk.call("DELETE", "/api/v1/studies/marked")[0] == 204
    assert not (brisk.root / "marked").exists()  # the service made it: removed
    submit(brisk, "unmarked", n=1)
    brisk.wait_state("unmarked", ("finished",))
    (brisk.root / "unmarked" / ".moetune-service").unlink()  # as if made by someone else
    assert brisk.call("DELETE", "/api/v1/studies/unmarked")[0] == 204
    assert (brisk.root / "unmarked").is_dir()  # the study is gone, the folder kept


def test_a_study_name_the_service_cannot_address_does_not_break_the_list(service):
    storage = optuna.storages.RDBStorage(f"sqlite:///{service.root / 'service.db'}")
    optuna.create_study(study_name="made elsewhere / odd name!", storage=storage)
    status, body = service.call("GET", "/api/v1/studies")
    assert status == 200, body
    assert "made elsewhere / odd name!" not in [s["name"] for s in body]


def test_errors_about_files_outside_the_data_roots_say_nothing_about_them(service):
    def detail(path: str) -> str:
        spec = SPEC.format(name="probe", n=1) + f"[model]\nfull = '{path}'\n"
        status, body = service.call("POST", "/api/v1/studies", {"spec": spec})
        assert status == 422
        return str(body["detail"]).replace(path, "PATH")

    exists = __file__  # a file that is there
    assert detail(exists) == detail("/no/such/file.json") == detail("/etc/../etc/hostname")


def test_a_law_study_runs_every_budget_on_the_service(brisk):
    """Its driver runs the budgets one after the other, each a study in the service's storage,
    and the study ends finished when the last has (no held-out budget here, to stay short).
    Its page's grid fills in as it runs, with the same fit law.md reports."""
    law = ("[law]\ntokens = [1_000, 3_000, 10_000, 32_000]\ntrials = 6\n"
           "[budget]\n").join(SPEC.format(name="lw", n=6).split("[budget]\n"))
    status, body = brisk.call("POST", "/api/v1/studies", {"spec": law})
    assert status == 201, body
    seen: set[tuple[str, ...]] = set()  # the budgets' states, as the page saw them
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        status, d = brisk.call("GET", "/api/v1/studies/lw")
        assert status == 200, d
        if d["law"]:
            seen.add(tuple(b["state"] for b in d["law"]["budgets"]))
        if d["state"] in ("finished", "failed", "interrupted"):
            break
        time.sleep(0.3)
    assert d["state"] == "finished", d
    grid = d["law"]
    assert [b["tokens"] for b in grid["budgets"]] == [1_000, 3_000, 10_000, 32_000]
    # what the page's law() reads (tests/tuner/test_service_browser.py draws such a grid)
    assert {"tokens", "state", "held_out", "done", "total", "running", "optimum", "best",
            "error", "in_lr_law"} <= set(grid["budgets"][0])
    placed = [b["optimum"] for b in grid["budgets"] if b["optimum"]]
    assert placed and {"lr", "lr_interval", "batch", "batch_placed", "at_edge"} <= set(placed[0])
    assert {"lr_law", "predicted", "held_out_check", "answer"} <= set(grid)
    assert grid["answer"].startswith("law lw: ")  # law.md's answer in one line, atop the grid
    assert all(b["state"] == "done" and b["done"] == b["total"] == 6 for b in grid["budgets"])
    # filling in: a budget searching while a later one waits, seen along the way
    assert any("searching" in states and states[-1] == "waiting" for states in seen), seen
    storage = optuna.storages.RDBStorage(f"sqlite:///{brisk.root / 'service.db'}")
    from tuner.study.store.storage import stored_spec
    from tuner.study.workflows.law_fit import law_fit_at

    fit = law_fit_at(stored_spec(optuna.load_study(study_name="lw", storage=storage)),
                     f"sqlite:///{brisk.root / 'service.db'}").to_dict()
    for row, b in zip(grid["budgets"], fit["budgets"], strict=True):
        assert (row["optimum"] or {}).get("lr") == (b["optimum"] or {}).get("lr"), (row, b)
        assert row["best"] == (b["best"] or None) and row["error"] == b["error"]
    assert grid["lr_law"] == fit["lr_law"]
    # one batch a budget: the pooled lr law, as law.md reports it
    assert grid["lr_method"] == fit["lr_method"] == "pooled"
    assert grid["lack_of_fit_p"] == fit["pooled"]["lack_of_fit_p"]
    names = optuna.get_all_study_names(storage)
    assert {"lw", "lw.t3000", "lw.t10000", "lw.t32000"} <= set(names)
    for name in ("lw", "lw.t32000"):
        study = optuna.load_study(study_name=name, storage=storage)
        done = [t for t in study.trials if t.state == TrialState.COMPLETE]
        assert len(done) == 6

    # the queued study is budget 0 itself: its spec trains at the smallest budget
    base = stored_spec(optuna.load_study(study_name="lw", storage=storage))
    assert base.budget.tokens_per_trial == 1_000 and base.law.budget == 0
    top = stored_spec(optuna.load_study(study_name="lw.t32000", storage=storage))
    assert top.budget.tokens_per_trial == 32_000


def test_a_ladder_climbs_on_the_service(brisk):
    ladder = SPEC.format(name="lad", n=3) + "[ladder]\nwidths = [32, 64]\npromote = 0.34\n"
    status, body = brisk.call("POST", "/api/v1/studies", {"spec": ladder})
    assert status == 201, body
    d = brisk.wait_state("lad", ("finished", "failed", "interrupted"), timeout_s=300)
    assert d["state"] == "finished", d
    # its page lists the rungs: both widths done, each with its own best trial
    rungs = d["ladder"]["rungs"]
    assert [(r["width"], r["state"]) for r in rungs] == [(32, "done"), (64, "done")], rungs
    assert all(r["done"] == r["total"] >= 1 and r["best"]["objective"] == "val_loss"
               for r in rungs), rungs
    storage = optuna.storages.RDBStorage(f"sqlite:///{brisk.root / 'service.db'}")
    top = optuna.load_study(study_name="lad.w64", storage=storage)
    own = [t for t in top.trials if t.state == TrialState.COMPLETE
           and not str(t.user_attrs.get(records.ORIGIN, "")).startswith(records.WARM_START)]
    assert len(own) >= 1  # the promoted candidate(s) trained at the top width



def test_export_over_the_service_prints_what_the_local_export_prints(brisk, tmp_path, capsys,
                                                                     monkeypatch):
    """``moetune export --server`` prints the warnings, notes and summary on stderr, the same
    lines as the local export of the same study (the service sends them with the files)."""
    from tuner.app import remote
    from tuner.app.cli import main

    if brisk.call("GET", "/api/v1/studies/said")[0] == 404:
        submit(brisk, "said", n=2)
    brisk.wait_state("said", ("finished",))

    def response(self, method, path, body=None):  # the --server client, through the app
        r = brisk.client.request(method, path, content=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        return r.content, r.headers.get("content-type", ""), r.headers

    monkeypatch.setattr(remote.Client, "response", response)
    flags = ["--pick", "knee", "--target", str(PUBLISHED_CONFIGS / "config_671B.json"),
             "--gpus", "2048", "--tokens", "14.8e12", "--format", "megatron"]
    capsys.readouterr()
    assert main(["export", "said", "--server", brisk.url, *flags,
                 "--out", str(tmp_path / "remote.args")]) == 0
    remote_err = capsys.readouterr().err.splitlines()
    assert main(["export", "said", "--root", str(brisk.root), "--storage", brisk.storage_url,
                 *flags, "--out", str(tmp_path / "local.args")]) == 0
    local_err = capsys.readouterr().err.splitlines()
    warned = [line for line in local_err if line.startswith("moetune export: warning: ")]
    assert warned and all(line in remote_err for line in warned)
    assert [x for x in remote_err if "wrote" not in x] == local_err
