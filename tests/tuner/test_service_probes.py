"""The service probed as a hostile token holder would, in process (`create_app` under
FastAPI's `TestClient`, no server, no Ray, the scheduler not started): study names that would
take the place of the service's own files, spec files outside the data roots, caps that must
count every training, and bad values that must be 4xx, not 500."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from fastapi.testclient import TestClient

from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.requests.studies import service_record, set_state
from tuner.app.service.access.auth import CACHE_S, Auth
from tuner.app.service.access.caps import trainings
from tuner.app.service.access.private import csrf_key, make_private
from tuner.app.service.access.tokens import TokenStore
from tuner.app.service.context import Service, ServiceConfig
from tuner.app.service.running import driver
from tuner.app.service.running.scheduler import Scheduler
from tuner.app.service.web.main import create_app
from tuner.study.specs.proxy import proxy_width, resolve_model_args
from tuner.study.specs.spec import load_spec, parse_spec, read_toml
from tuner.study.store import database as db
from tuner.study.workflows.ladder import rung_spec

SPEC = """
[study]
name = "{name}"
n_trials = {n}
max_concurrent = 1
sampler = "random"
[budget]
tokens_per_trial = 300
eval_every_tokens = 100
[objectives]
val_loss = "minimize"
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
"""


@dataclass
class InProcess:
    root: Path
    client: TestClient
    service: Service

    def submit(self, spec: str, **body: object) -> tuple[int, dict]:
        r = self.client.post("/api/v1/studies", json={"spec": spec, **body})
        return r.status_code, r.json()


def in_process(root: Path, **config: object) -> InProcess:
    """An open loopback service (no token made) over a SQLite database in ``root``."""
    make_private(root, root / "service.db")
    url = f"sqlite:///{root / 'service.db'}"
    storage = db.open_storage(url)
    cfg = ServiceConfig(root=root, storage_url=url, **config)  # type: ignore[arg-type]
    scheduler = Scheduler(storage=storage, storage_url=url, root=root,
                          trainer="tuner.testing:slow_train", max_running=1)
    auth = Auth(TokenStore(storage.engine), csrf_key(root))
    service = Service(cfg, storage, auth, scheduler)
    # no `with`: the app's lifespan (the scheduler, which starts Ray drivers) does not run
    client = TestClient(create_app(service), base_url="http://127.0.0.1:8470",
                        raise_server_exceptions=False)
    return InProcess(root=root, client=client, service=service)


@pytest.fixture
def svc(tmp_path) -> Iterator[InProcess]:
    s = in_process(tmp_path / "root")
    yield s
    s.service.views.close()


@pytest.mark.parametrize("name", ["service.db-journal", "service.db-wal", "service.db-shm",
                                  "service.db", "service.db-mj1A2B3C", "csrf.key", "ray.token"])
def test_a_study_may_not_take_the_name_of_a_file_the_service_keeps_in_its_root(svc, name):
    before = sorted(p.name for p in svc.root.iterdir())
    status, body = svc.submit(SPEC.format(name="fine", n=2), name=name)
    assert status == 422, body
    assert body["field"] == "study.name" and repr(name) in body["detail"]
    assert "must not name what the service keeps in its root" in body["detail"]
    assert sorted(p.name for p in svc.root.iterdir()) == before  # nothing made
    status, _ = svc.submit(SPEC.format(name="fine", n=2))
    assert status == 201
    # the database still opens: a new connection, as a token revoke or a driver makes
    assert TokenStore(db.open_storage(svc.service.config.storage_url).engine).any() is False


@pytest.mark.parametrize("query", ["", "?timeout=30", "?timeout=30&uri=false"])
@pytest.mark.parametrize("name", ["team.db-journal", "team.db-mj0a1b", "team.dbx"])
def test_a_custom_sqlite_database_in_the_root_reserves_its_name_too(tmp_path, query, name):
    root = tmp_path / "root"
    s = in_process(root)
    s.service.config = ServiceConfig(root=root,
                                     storage_url=f"sqlite:///{root / 'team.db'}{query}")
    status, body = s.submit(SPEC.format(name=name, n=2))
    s.service.views.close()
    assert status == 422 and body["field"] == "study.name", body
    assert not (root / name).exists()


def test_a_space_file_is_only_ever_a_shipped_space(svc, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"  # the service's working folder, outside every data root
    cwd.mkdir()
    (cwd / "secrets.toml").write_text('PGPASSWORD = "hunter2"\n')
    (cwd / "deepseek_v3.toml").write_text("not = [valid\n")  # shadows a shipped name
    monkeypatch.chdir(cwd)
    spec = SPEC.format(name="{name}", n=2).split("[space.params.lr]")[0]
    answers = {}
    for name, file in (("a", "secrets.toml"), ("b", "missing.toml"), ("c", "../secrets.toml")):
        status, body = svc.submit(spec.format(name=name) + f'[space]\nfile = "{file}"\n')
        assert status == 422 and body["field"] == "space.file", body
        for leak in ("PGPASSWORD", str(cwd), "hunter2", "first line", "exists"):
            assert leak not in body["detail"]
        answers[file] = body["detail"].replace(repr(file), "NAME")
    assert len(set(answers.values())) == 1  # the same words whether the file is there or not
    status, body = svc.submit(spec.format(name="d") + '[space]\nfile = "deepseek_v3.toml"\n')
    assert status == 201, body  # the shipped space, not the working folder's file


LADDER = "\n[ladder]\nwidths = {widths}\npromote = 1\nproposals = {proposals}\n"
NOISE = SPEC.replace("sampler =", "noise_repeats = {repeats}\nsampler =")


def test_the_trainings_counted_are_those_a_real_service_ran():
    def spec(text: str):
        return parse_spec(read_toml(text, "spec"))

    # seen on a real `moetune serve`: 2 trials + 3 re-trainings of each = 8 trainings; a
    # ladder of 4 trials, promote = 1, 2 proposals per upper rung: 4 + 6 + 8 = 18
    assert trainings(spec(NOISE.format(name="n", n=2, repeats=3))) == 8
    assert trainings(spec(SPEC.format(name="l", n=4)
                          + LADDER.format(widths=[64, 128, 256], proposals=2))) == 18


def test_the_shipped_law_counts_every_budget_its_predicted_trials_and_its_noise():
    """search_spaces/law.toml: 4 fitted budgets, the held-out budget and the held-out batch of
    24 trials each, the last two training their predicted recipe first, and noise_repeats
    re-trainings of the top trials at each of the six."""
    law = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "law.toml")
    s = law.study
    assert law.law.held_out and law.law.held_out_batch and len(law.law.budgets) == 6
    noise = s.noise_repeats * s.noise_top
    assert trainings(law) == 6 * (law.law.trials or s.n_trials) + 2 + 6 * noise


@pytest.mark.parametrize(("text", "field"), [
    (NOISE.format(name="noisy", n=2, repeats=3), "study.n_trials"),  # 8 trainings
    (NOISE.format(name="noisier", n=2, repeats=100000), "study.n_trials"),
    (SPEC.format(name="lad", n=4) + LADDER.format(widths=[64, 128, 256], proposals=2),
     "ladder.proposals"),  # 18
    (SPEC.format(name="lad2", n=2) + LADDER.format(widths=[64, 128], proposals=10000),
     "ladder.proposals"),
    (SPEC.format(name="wide", n=1) + LADDER.format(widths=[64, 1048576], proposals=0),
     "ladder.widths"),
])
def test_the_caps_count_every_training_and_every_width(tmp_path, text, field):
    s = in_process(tmp_path / "root", max_trials=6, max_width=1024)
    status, body = s.submit(text)
    names = s.service.names()
    s.service.views.close()
    assert status == 422 and body["field"] == field, body
    assert "on this service (serve --max-" in body["detail"]
    assert names == []  # nothing created


def test_a_spec_within_the_caps_is_queued(tmp_path):
    s = in_process(tmp_path / "root", max_trials=6, max_width=1024)
    status, body = s.submit(NOISE.format(name="fits", n=2, repeats=2))  # 2 + 2*2 = 6
    s.service.views.close()
    assert status == 201, body


@pytest.mark.parametrize(("model", "field", "width"), [
    ('preset = "proxy-l"', "model.preset", 1024),
    (f'full = "{PUBLISHED_CONFIGS}/config_16B.json"\nproxy = "proxy-m"', "model.proxy", 384),
    (f'full = "{PUBLISHED_CONFIGS}/config_16B.json"', "model.proxy", 128),  # proxy-s
])
def test_max_width_caps_a_plain_studys_proxy_too(tmp_path, model, field, width):
    s = in_process(tmp_path / "root", max_width=64)
    status, body = s.submit(SPEC.format(name="wide", n=1) + f"[model]\n{model}\n")
    names = s.service.names()
    s.service.views.close()
    assert status == 422 and body["field"] == field, body
    assert f"at {width}" in body["detail"] and "serve --max-width" in body["detail"]
    assert names == []


def test_a_proxy_within_max_width_is_queued(tmp_path):
    s = in_process(tmp_path / "root", max_width=64)
    status, body = s.submit(SPEC.format(name="narrow", n=1) + '[model]\npreset = "debug"\n')
    s.service.views.close()
    assert status == 201, body


@pytest.mark.parametrize("text", [
    SPEC.format(name="p", n=1) + '[model]\npreset = "proxy-m"\n',
    SPEC.format(name="f", n=1) + f'[model]\nfull = "{PUBLISHED_CONFIGS}/config_16B.json"\n'
                                 'proxy = "proxy-l"\n',
    SPEC.format(name="l", n=2) + LADDER.format(widths=[64, 256], proposals=1),
])
def test_the_width_capped_is_the_width_trained(text):
    """`proxy_width`, judged without reading a file, is the widest `resolve_model_args` builds
    (a ladder's top rung)."""
    spec = parse_spec(read_toml(text, "spec"))
    top = rung_spec(spec, len(spec.ladder.widths) - 1, []) if spec.ladder.on else spec
    assert proxy_width(spec) == resolve_model_args(top).dim


@pytest.mark.parametrize(("extra", "field"), [
    ('[data]\ncorpus = "/tmp/x\\u0000y"\n', "data.corpus"),  # a NUL byte: ValueError in os.path
    ('[data]\ntokenizer = "bpe:99999999999999999999"\n', "data.tokenizer"),  # OverflowError
])
def test_values_that_broke_the_handlers_are_a_4xx_naming_the_field(tmp_path, extra, field):
    s = in_process(tmp_path / "root", data_roots=(tmp_path,))
    status, body = s.submit(SPEC.format(name="odd", n=2) + extra)
    s.service.views.close()
    assert status == 422 and body["field"] == field, body


def test_the_dashboards_script_is_served_without_accept_encoding(svc):
    request = svc.client.build_request("GET", "/static/bundle.js")
    del request.headers["accept-encoding"]  # a client that sends none (bottle needs it)
    r = svc.client.send(request)
    assert r.status_code == 200 and r.text.startswith("/*")


def test_a_change_to_a_study_deleted_meanwhile_is_a_404(svc, monkeypatch):
    assert svc.submit(SPEC.format(name="gone", n=2))[0] == 201
    loaded = Service.study

    def loaded_then_deleted(self, name):  # another request deletes it right after this load
        study = loaded(self, name)
        optuna.delete_study(study_name=name, storage=self.storage)
        return study

    monkeypatch.setattr(Service, "study", loaded_then_deleted)
    r = svc.client.post("/api/v1/studies/gone/cancel")
    assert r.status_code == 404 and "deleted meanwhile" in r.json()["detail"], r.text


def test_of_a_burst_of_changes_one_wins_and_the_others_are_refused(svc, monkeypatch):
    assert svc.submit(SPEC.format(name="burst", n=2))[0] == 201
    assert svc.client.post("/api/v1/studies/burst/cancel").json() == {"state": "cancelled"}
    deleting, others_done = threading.Event(), threading.Event()
    delete_study = optuna.delete_study

    def held_delete(**kwargs):  # the delete has checked the state; the others may run now
        deleting.set()
        others_done.wait(10)
        delete_study(**kwargs)

    monkeypatch.setattr(optuna, "delete_study", held_delete)
    got: dict[str, int] = {}

    def call(method: str, path: str) -> None:
        got[method + path] = svc.client.request(method, "/api/v1/studies/burst" + path
                                                ).status_code

    first = threading.Thread(target=call, args=("DELETE", ""))
    first.start()
    assert deleting.wait(30)
    rest = [threading.Thread(target=call, args=("POST", p)) for p in ("/resume", "/cancel")]
    for t in rest:
        t.start()
    for t in rest:  # unlocked, they answer now; locked, they wait for the delete
        t.join(2)
    others_done.set()
    for t in (first, *rest):
        t.join(30)
    assert got["DELETE"] == 204
    assert got["POST/resume"] in (404, 409) and got["POST/cancel"] in (404, 409), got


def test_the_openapi_description_needs_a_token_once_tokens_exist(svc):
    assert svc.client.get("/openapi.json").status_code == 200  # open loopback: the local user
    token = TokenStore(svc.service.storage.engine).create("alice")
    time.sleep(CACHE_S)  # the service learns within CACHE_S that tokens exist
    assert svc.client.get("/openapi.json").status_code == 401
    r = svc.client.get("/openapi.json", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and "/api/v1/studies" in r.json()["paths"]


def test_a_revoked_tokens_event_stream_ends(svc):
    store = TokenStore(svc.service.storage.engine)
    token = store.create("alice")
    bearer = {"Authorization": f"Bearer {token}"}
    time.sleep(CACHE_S)
    r = svc.client.post("/api/v1/studies", json={"spec": SPEC.format(name="watched", n=2)},
                        headers=bearer)
    assert r.status_code == 201  # queued for good: the scheduler is not running
    events: list[str] = []

    def watch() -> None:
        with svc.client.stream("GET", "/api/v1/studies/watched/events", headers=bearer) as r:
            for line in r.iter_lines():
                events.append(line)
                if line == "event: progress":
                    started.set()

    started = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert started.wait(30)
    store.revoke("alice")
    watcher.join(30)  # the stream reads the token again within CACHE_S and ends
    assert not watcher.is_alive()
    assert events[-2:] == ["data: " + json.dumps({"detail": "Authorization: unknown token."}),
                           ""] and "event: end" in events, events[-4:]


@pytest.mark.parametrize(("key", "value"), [
    ("cpus_per_trial", "1e-300"), ("cpus_per_trial", "inf"), ("gpus_per_trial", "inf"),
    ("trial_timeout_s", "1e308"), ("trial_timeout_s", "inf"), ("trial_timeout_s", "nan")])
def test_absurd_resources_are_refused(svc, key, value):
    status, body = svc.submit(SPEC.format(name="greedy", n=2) + f"[resources]\n{key} = {value}\n")
    assert status == 422 and body["field"] == f"resources.{key}", body
    assert f"but got {float(value)}" in body["detail"]


def test_a_corpus_swapped_for_a_link_out_of_the_roots_after_submit_is_not_read(tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside.txt"
    data.mkdir()
    text = "the quick brown fox jumps over the lazy dog. " * 400
    (data / "corpus.txt").write_text(text)
    outside.write_text("secret " * 5)  # too small to train on: its size would be the error
    s = in_process(tmp_path / "root", data_roots=(data,))
    status, body = s.submit(SPEC.format(name="swapped", n=2)
                            + f'[data]\ncorpus = "{data / "corpus.txt"}"\n')
    s.service.views.close()
    assert status == 201, body
    (data / "corpus.txt").unlink()  # while it waits in the queue
    (data / "corpus.txt").symlink_to(outside)
    study = optuna.load_study(study_name="swapped", storage=s.service.storage)
    set_state(study, "starting")
    state = driver.run_driver("swapped", s.service.config.storage_url, str(s.root),
                              "tuner.testing:slow_train", (str(data), str(PUBLISHED_CONFIGS)))
    error = service_record(study)["error"]
    assert state == "failed" and "data.corpus: must be a file under a data root" in error, error
    assert "token" not in error and str(outside) not in error  # nothing about the file read



def test_a_folder_corpus_with_a_file_linked_from_outside_is_refused_unread(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("MOETUNE_CACHE", str(tmp_path / "cache"))
    data, outside = tmp_path / "data", tmp_path / "outside.txt"
    (data / "dir").mkdir(parents=True)
    (data / "dir" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    outside.write_text("secret " * 400)
    (data / "dir" / "zz_link.txt").symlink_to(outside)
    s = in_process(tmp_path / "root", data_roots=(data,))
    status, body = s.submit(SPEC.format(name="linked", n=2)
                            + f'[data]\ncorpus = "{data / "dir"}"\n')
    s.service.views.close()
    assert status == 422 and body["field"] == "data.corpus", body
    assert str(outside) not in body["detail"]
    assert not (tmp_path / "cache").exists()  # no byte of it cached

# -- a law's budgets and a ladder's rungs belong to their law or ladder ----------------------

LAW = SPEC.replace("[budget]",
                   "[law]\ntokens = [1_000, 3_000, 10_000, 32_000]\ntrials = 2\n[budget]")


def _spec(text: str) -> Any:
    return parse_spec(read_toml(text, "spec"))


def _stored(svc: InProcess, spec_text: str, owner: str = "bob") -> optuna.Study:
    """A study put in the service's storage as a submit of an older service would have."""
    from tuner.app.requests.studies import enqueue
    from tuner.study.store import storage as st

    study = st.create_study(_spec(spec_text), svc.service.storage)
    enqueue(study, owner)
    return study


@pytest.mark.parametrize("name", ["victim.t1000", "victim.t1000.b32", "victim2.w32"])
def test_a_name_shaped_like_a_budget_or_a_rung_is_refused(svc, name):
    status, body = svc.submit(SPEC.format(name=name, n=2))
    assert status == 422 and body["field"] == "study.name", body
    assert "must not end like a law's budget or a ladder's rung" in body["detail"]
    assert not (svc.root / name).exists()


def test_a_law_never_adopts_a_study_of_its_budgets_name(svc):
    _stored(svc, SPEC.format(name="victim.t3000", n=2))  # bob's, from before the names' rule
    status, body = svc.submit(LAW.format(name="victim", n=2))
    assert status == 422 and body["field"] == "study.name", body
    assert "'victim.t3000', a stage of 'victim', exists already" in body["detail"]
    assert not (svc.root / "victim").exists()


def test_a_ladder_never_adopts_a_folder_of_its_rungs_name(svc):
    (svc.root / "victim2.w64").mkdir()  # a command-line study's folder, say
    status, body = svc.submit(SPEC.format(name="victim2", n=2)
                              + "[ladder]\nwidths = [32, 64]\n")
    assert status == 422 and "'victim2.w64'" in body["detail"], body


def test_a_stage_refuses_a_study_its_law_did_not_make_when_it_starts(tmp_path):
    """Between a law's submit and its budget's start, another's study of that name appeared:
    the stage is refused (the driver records why), never run in it."""
    from tuner.study.store import storage as st
    from tuner.study.workflows.law import law_stages
    from tuner.study.workflows.stage import StageTaken

    url = f"sqlite:///{tmp_path / 'study.db'}"
    store = db.open_storage(url)
    bobs = st.create_study(_spec(SPEC.format(name="victim.t3000", n=2)), store)
    bobs.set_user_attr("moetune.service", {"owner": "bob", "state": "queued"})
    stages = law_stages(_spec(LAW.format(name="victim", n=2)), url,
                        log=lambda *_: None)
    assert next(stages).index == 0
    with pytest.raises(StageTaken, match="'victim.t3000' exists and was not made by it"):
        stages.send(None)


def test_a_rung_refuses_a_study_its_ladder_did_not_make_when_it_starts(tmp_path):
    from types import SimpleNamespace

    from tuner.study.store import storage as st
    from tuner.study.workflows.ladder import ladder_stages
    from tuner.study.workflows.stage import StageTaken

    url = f"sqlite:///{tmp_path / 'study.db'}"
    store = db.open_storage(url)
    st.create_study(_spec(SPEC.format(name="victim2.w64", n=2)), store)
    ladder = _spec(SPEC.format(name="victim2", n=2) + "[ladder]\nwidths = [32, 64]\n")
    stages = ladder_stages(ladder, url, log=lambda *_: None)
    bottom = st.create_study(next(stages).spec, store)
    with pytest.raises(StageTaken, match="'victim2.w64' exists"):
        stages.send(SimpleNamespace(study=bottom))


def test_a_stage_its_law_made_is_marked_and_resumed(tmp_path):
    from tuner.study.store import storage as st
    from tuner.study.workflows.law import budget_spec
    from tuner.study.workflows.stage import check_owned

    law = _spec(LAW.format(name="victim", n=2))
    store = db.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    stage = st.create_study(budget_spec(law, 1), store)
    assert stage.user_attrs["moetune.stage_of"] == "victim"
    check_owned(stage, "victim")  # its own law runs it
    older = st.create_study(budget_spec(_spec(LAW.format(name="old", n=2)), 1),
                            store)
    older.set_user_attr("moetune.stage_of", None)  # made before the mark: its spec says whose
    check_owned(optuna.load_study(study_name="old.t3000", storage=store), "old")


def test_deleting_a_law_deletes_its_every_budget_and_their_folders(svc):
    from tuner.study.store import storage as st
    from tuner.study.workflows.law import budget_spec

    status, body = svc.submit(LAW.format(name="victim", n=2))
    assert status == 201, body
    assert (svc.root / "victim.t3000" / ".moetune-service").is_file()  # made and marked
    storage = svc.service.storage
    st.create_study(budget_spec(_spec(LAW.format(name="victim", n=2)), 1),
                    storage)  # as the law's driver makes it
    set_state(optuna.load_study(study_name="victim", storage=storage), "cancelled")
    assert svc.client.delete("/api/v1/studies/victim").status_code == 204
    assert {"victim", "victim.t3000"}.isdisjoint(db.study_names(storage))
    assert not (svc.root / "victim").exists() and not (svc.root / "victim.t3000").exists()
    status, body = svc.submit(LAW.format(name="victim", n=2))  # a new law of the same name
    assert status == 201, body


@pytest.mark.parametrize("raw", [b'{"spec": 1e999}', b'{"spec": NaN}', b'{"spec": [1, -Infinity]}',
                                 b'{"spec": "x", "name": Infinity}',
                                 b'{"spec": "x", "space": {"a": NaN}}'])
def test_a_non_finite_number_in_a_body_is_a_422(svc, raw):
    r = svc.client.post("/api/v1/studies", content=raw,
                        headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] in ("spec", "name", "space")


def test_a_non_finite_number_in_an_export_is_a_422(svc):
    assert svc.submit(SPEC.format(name="nums", n=2))[0] == 201
    for raw in (b'{"pick": "knee", "target": "deepseek-v3-671b", "gpus": NaN}',
                b'{"pick": "knee", "target": "deepseek-v3-671b", "tokens": 1e999}'):
        r = svc.client.post("/api/v1/studies/nums/export", content=raw,
                            headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text


def test_the_dashboards_after_must_be_a_number(svc):
    r = svc.client.get("/api/studies/0?after=abc")
    assert r.status_code == 422 and r.json()["field"] == "after", r.text


def test_the_report_page_has_a_content_security_policy(svc):
    """report.html holds study names and parameters: it may run its own inline script and load
    or send nothing."""
    for name in ("nope", "x%2F..%2Fy"):
        r = svc.client.get(f"/api/v1/studies/{name}/report")
        csp = r.headers.get("content-security-policy", "")
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, r.headers
        assert "connect-src" not in csp  # default-src 'none' covers it: nothing is sent
