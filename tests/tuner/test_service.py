"""`moetune serve` as a team uses it: a real server process, fake trainers to keep it fast.

submit → live progress → finished → report and export; cancel and resume with nothing lost;
the service SIGKILLed mid-study and restarted: the study finishes with no trial lost or left
RUNNING; bad input refused with the field named and nothing created; the CLI against it."""

from __future__ import annotations

import http.client
import io
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import optuna
import pytest
from optuna.trial import TrialState
from service_process import SPEC, Server

from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.cli import main
from tuner.study.store import records

LIVE = ("queued", "starting", "running")  # a just-accepted study's state, read after acceptance


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("service") / "root").start()
    yield srv
    srv.stop()


def submit(server: Server, name: str, n: int = 4) -> dict:
    status, body = server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name, n=n)})
    assert status == 201, body
    # the scheduler may pick the study up before the response is written: any live state is right
    assert body["state"] in LIVE and body["owner"] == "local"
    return body


def events(server: Server, name: str) -> list[dict]:
    """Every progress event of the study's stream, until it ends."""
    out = []
    with urllib.request.urlopen(f"{server.url}/api/v1/studies/{name}/events", timeout=180) as r:
        kind = ""
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "progress":
                out.append(json.loads(line[6:]))
            elif line.startswith("data: ") and kind == "end":
                break
    return out


def test_submit_streams_progress_then_report_and_export(server):
    submit(server, "flow", n=4)
    seen = events(server, "flow")
    done = [e["progress"]["done"] for e in seen]
    assert done == sorted(done) and done[-1] == 4  # progress only grows, to n_trials
    assert any(e["state"] == "running" for e in seen) and seen[-1]["state"] == "finished"
    final = seen[-1]
    assert len(final["front"]) >= 1 and final["knee"] in final["front"]
    assert all(t["curve"] for t in final["trials"] if t["outcome"] == "complete")
    status, html = server.call("GET", "/api/v1/studies/flow/report")
    assert status == 200 and "<html" in html.lower() and "flow" in html
    built = (server.root / "flow" / "report" / "report.html").stat().st_mtime_ns
    assert server.call("GET", "/api/v1/studies/flow/report") == (status, html)
    # the study did not change: the report was sent again, not built again
    assert (server.root / "flow" / "report" / "report.html").stat().st_mtime_ns == built
    status, text = server.call("POST", "/api/v1/studies/flow/export", {
        "pick": "knee", "target": str(PUBLISHED_CONFIGS / "config_671B.json"), "gpus": 2048,
        "tokens": 14.8e12, "format": "megatron"})
    assert status == 200 and "--num-layers 61" in text
    # torchtitan >= 0.3 loads a Python module named by its file: the page's file is one
    status, text = server.call("POST", "/api/v1/studies/flow/export", {
        "pick": "knee", "target": str(PUBLISHED_CONFIGS / "config_671B.json"), "gpus": 2048,
        "tokens": 14.8e12, "format": "torchtitan"})
    assert status == 200 and "--module flow_torchtitan" in text and "def moetune_config" in text
    status, body = server.call("POST", "/api/v1/studies/flow/export", {
        "pick": "knee", "target": "/etc/nowhere.json", "gpus": 8, "tokens": 1e9})
    assert status == 422 and "data root" in body["detail"] and body["field"] == "--target"


def test_cancel_mid_study_then_resume_loses_nothing(server):
    submit(server, "cancel-me", n=6)
    server.wait_trials_running("cancel-me")
    status, body = server.call("POST", "/api/v1/studies/cancel-me/cancel")
    assert status == 200 and body["state"] == "stopping"
    d = server.wait_state("cancel-me", ("cancelled",))
    assert d["progress"]["running"] == 0 and d["progress"]["done"] < 6
    interrupted = [t for t in d["trials"] if t["reason"] == "interrupted"]
    assert interrupted  # the trials in flight, queued to be re-run on resume
    assert not [t for t in d["trials"] if t["outcome"] == "pruned"]  # never counted as done
    assert server.call("POST", "/api/v1/studies/cancel-me/cancel")[0] == 409  # nothing to stop


def test_cancelled_study_resumes_to_the_end(server):
    submit(server, "resumable", n=6)
    server.wait_state("resumable", ("running",))
    server.call("POST", "/api/v1/studies/resumable/cancel")
    server.wait_state("resumable", ("cancelled",))
    status, body = server.call("POST", "/api/v1/studies/resumable/resume")
    assert status == 200 and body["state"] in LIVE
    d = server.wait_state("resumable", ("finished",))
    assert d["progress"]["done"] == 6 and d["progress"]["running"] == 0
    status, _ = server.call("DELETE", "/api/v1/studies/resumable")
    assert status == 204
    assert server.call("GET", "/api/v1/studies/resumable")[0] == 404


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
def test_bad_submissions_name_the_field_and_create_nothing(server, body, status, words):
    before = {s["name"] for s in server.call("GET", "/api/v1/studies")[1]}
    got, out = server.call("POST", "/api/v1/studies", body)
    assert got == status, out
    text = json.dumps(out)
    assert str(server.root) not in text  # no error shows where the service keeps its files
    for w in words:
        assert w in text
    assert {s["name"] for s in server.call("GET", "/api/v1/studies")[1]} == before


def test_oversized_and_unknown_requests(server):
    status, out = server.call("POST", "/api/v1/studies", raw=b"x" * (300 * 1024))
    assert status == 413 and "at most" in out["detail"]
    assert server.call("GET", "/api/v1/studies/no-such-study")[0] == 404
    assert server.call("GET", "/api/v1/studies/..%2Fetc")[0] == 404
    submit(server, "dup", n=2)
    status, out = server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="dup", n=2)})
    assert status == 422 and out["field"] == "study.name"


def chunked_post(server: Server, path: str, chunks: list[bytes], *, end: bool,
                 content_type: str = "application/json") -> tuple[int, dict]:
    """POST a body in chunks (Transfer-Encoding: chunked, no Content-Length); ``end=False``
    leaves the body unfinished, so only a server that answers before reading it all answers."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}"
                  "\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        for chunk in chunks:
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if end:
            s.sendall(b"0\r\n\r\n")
        response = http.client.HTTPResponse(s)
        response.begin()
        return response.status, json.loads(response.read())


def test_a_chunked_body_is_held_to_the_same_limit(server):
    before = {s["name"] for s in server.call("GET", "/api/v1/studies")[1]}
    # 512 KiB against the 256 KiB limit, never finished: the 413 comes while it is being sent
    status, out = chunked_post(server, "/api/v1/studies", [b"x" * 65536] * 8, end=False)
    assert status == 413 and "at most 262144 bytes" in out["detail"], out
    status, out = chunked_post(server, "/submit", [b"spec=" + b"x" * 65536] * 8, end=False,
                               content_type="application/x-www-form-urlencoded")  # a form too
    assert status == 413 and "at most 262144 bytes" in out["detail"], out
    # under the limit, a chunked body is read as any other
    body = json.dumps({"spec": SPEC.format(name="chunked", n=2)}).encode()
    status, out = chunked_post(server, "/api/v1/studies", [body[:100], body[100:]], end=True)
    assert status == 201 and out["name"] == "chunked", out
    assert {s["name"] for s in server.call("GET", "/api/v1/studies")[1]} == before | {"chunked"}


def test_the_dashboard_is_mounted_read_only(server):
    status, page = server.call("GET", "/dashboard")
    assert status == 200 and "Optuna Dashboard" in page
    status, studies = server.call("GET", "/api/studies")  # the dashboard's own API: readable
    assert status == 200 and "study_summaries" in json.dumps(studies)
    status, out = server.call("POST", "/api/studies", {"study_name": "x",
                                                      "directions": ["minimize"]})
    assert status == 405 and "read-only" in out["detail"]
    assert server.call("DELETE", "/api/studies/0")[0] == 405


def download(server: Server, path: str, body: bytes, content_type: str) -> tuple[int, dict, bytes]:
    """(status, headers, raw body) of a POST whose answer may be a zip."""
    req = urllib.request.Request(server.url + path, data=body, method="POST")
    req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def files_of(headers: dict, raw: bytes) -> dict[str, str]:
    """A download's files by name: a zip's entries, or the one file Content-Disposition names."""
    if headers["content-type"] == "application/zip":
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            return {n: z.read(n).decode() for n in z.namelist()}
    return {headers["content-disposition"].split('filename="')[1].rstrip('"'): raw.decode()}


@pytest.mark.parametrize("fmt", ["deepseek", "hf", "megatron"])
def test_the_page_export_downloads_every_file_the_cli_writes(server, tmp_path, capsys, fmt):
    """The same study and format: the JSON API's download, the page form's and the files
    ``moetune export --out`` writes are the same files (a model config and its sidecar come as
    one zip), and ``moetune export --server`` unpacks them as the local export writes them."""
    if server.call("GET", "/api/v1/studies/exported")[0] == 404:
        submit(server, "exported", n=2)
    server.wait_state("exported", ("finished",))
    target = str(PUBLISHED_CONFIGS / "config_671B.json")
    options = {"pick": "knee", "target": target, "gpus": 2048, "tokens": 14.8e12,
               "format": fmt}
    status, headers, raw = download(server, "/api/v1/studies/exported/export",
                                    json.dumps(options).encode(), "application/json")
    assert status == 200, raw
    got = files_of(headers, raw)
    stem = f"exported-{fmt}"
    if fmt in ("deepseek", "hf"):
        assert headers["content-type"] == "application/zip"
        assert headers["content-disposition"] == f'attachment; filename="{stem}.zip"'
        assert list(got) == [f"{stem}.json", f"{stem}.moetune.json"]
    else:
        assert headers["content-type"].startswith("text/plain")
        assert headers["content-disposition"] == f'attachment; filename="{stem}.args"'
    # the page's form sends text; its download is the same
    form = urllib.parse.urlencode(options | {"gpus": "2048", "tokens": "14.8e12"}).encode()
    status, page_headers, page_raw = download(server, "/studies/exported/export", form,
                                              "application/x-www-form-urlencoded")
    assert status == 200 and files_of(page_headers, page_raw) == got
    # the command line on the service's own storage writes exactly these files
    out = tmp_path / "cli" / next(iter(got))
    assert main(["export", "exported", "--root", str(server.root), "--storage",
                 f"sqlite:///{server.root / 'service.db'}", "--pick", "knee", "--target",
                 target, "--gpus", "2048", "--tokens", "14.8e12", "--format", fmt,
                 "--out", str(out)]) == 0, capsys.readouterr().err
    assert {p.name: p.read_text() for p in out.parent.iterdir()} == got
    # and --server writes them where the local export would, named after --out
    remote_out = tmp_path / "remote" / f"run.{next(iter(got)).rsplit('.', 1)[1]}"
    assert main(["export", "exported", "--server", server.url, "--pick", "knee", "--target",
                 target, "--gpus", "2048", "--tokens", "14.8e12", "--format", fmt,
                 "--out", str(remote_out)]) == 0, capsys.readouterr().err
    renamed = {name.replace(stem, "run"): text for name, text in got.items()}
    assert {p.name: p.read_text() for p in remote_out.parent.iterdir()} == renamed


def test_bad_export_and_cancel_requests_name_the_field(server):
    if server.call("GET", "/api/v1/studies/exported")[0] == 404:
        submit(server, "exported", n=2)
    target = str(PUBLISHED_CONFIGS / "config_671B.json")
    for options, field in [({"gpus": "many"}, "--gpus"), ({"format": "yaml"}, "--format"),
                           ({"pick": "trial x"}, "--pick"), ({"root": "/"}, "--root"),
                           ({"colour": 1}, "--colour"), ({"gpus": None}, "--gpus")]:
        body = {"target": target, "gpus": 8, "tokens": 1e9} | options
        status, out = server.call("POST", "/api/v1/studies/exported/export", body)
        assert status == 422 and out["field"] == field, out
        assert out["detail"].startswith(field)
    status, out = server.call("POST", "/api/v1/studies/a%5Cb/cancel")
    assert status == 422 and out["field"] == "study", out
    status, out = server.call("DELETE", "/api/v1/studies/a%5Cb")
    assert status == 422 and out["field"] == "study", out
    assert server.call("POST", "/api/v1/studies/no-such-study/cancel")[0] == 404


def test_the_cli_talks_to_the_service(server, tmp_path, capsys):
    spec = tmp_path / "cli.toml"
    spec.write_text(SPEC.format(name="from-cli", n=2))
    assert main(["submit", str(spec), "--server", server.url]) == 0
    assert "study from-cli queued" in capsys.readouterr().out
    server.wait_state("from-cli", ("finished",))
    assert main(["status", "from-cli", "--server", server.url]) == 0
    out = capsys.readouterr().out
    assert "from-cli: finished" in out and out.count("complete") >= 2
    assert main(["cancel", "from-cli", "--server", server.url]) == 2  # finished: nothing to stop
    assert "only a queued or running study" in capsys.readouterr().err
    assert main(["list", "--server", "http://127.0.0.1:1"]) == 1  # nobody there
    assert main(["submit", str(spec), "--server", server.url]) == 2  # the name exists
    assert "study.name" in capsys.readouterr().err


def test_a_service_killed_mid_study_is_restarted_and_finishes(tmp_path):
    srv = Server(tmp_path / "root").start()
    try:
        submit(srv, "survivor", n=8)
        srv.wait_trials_running("survivor")
        srv.kill()  # the service and the local Ray it started
        srv.start()
        d = srv.wait_state("survivor", ("finished",), timeout_s=240)
    finally:
        srv.stop()
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'root' / 'service.db'}")
    trials = optuna.load_study(study_name="survivor", storage=storage).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 8 and d["progress"]["done"] == 8
    # every interrupted trial was re-run: its parameters reappear in a later trial
    for t in trials:
        if t.user_attrs.get(records.REASON) == "interrupted":
            assert any(u.user_attrs.get(records.RERUN_OF) == t.number for u in trials)


def test_serve_refuses_unsafe_setups(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tuner", "serve", "--root",
                               str(tmp_path / "r"), *args], capture_output=True, text=True,
                              timeout=120)

    out = run("--host", "0.0.0.0")
    assert out.returncode == 2 and "only with access tokens" in out.stderr
    out = run("--address", "127.0.0.1:1")
    assert out.returncode == 2 and "SQLite file cannot be shared" in out.stderr
    with socket.socket() as taken:  # the port is refused before Ray starts, not lost to it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("--port", str(port))
    assert out.returncode == 2 and f"--port: 127.0.0.1:{port} cannot be bound" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_dashboard_shows_infeasible_trials_as_infeasible(server):
    """optuna-dashboard reads one `constraints` list; Optuna 5 stores a key per constraint. The
    dashboard's read-only view adds the list; the stored trial (what samplers read) is as was."""
    from tuner.app.service.dashboard import DashboardStorage, ReadOnlyStorage

    storage = optuna.storages.RDBStorage(f"sqlite:///{server.root / 'service.db'}")
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
    status, body = server.call("GET", f"/api/studies/{study._study_id}?after=0")
    assert status == 200
    assert sorted(body["trials"][0]["constraints"]) == [-1.0, 1.5]  # 1.5 > 0: infeasible


def test_a_name_whose_folder_exists_is_refused_and_delete_keeps_what_it_did_not_make(server):
    cli = server.root / "cli-made"  # e.g. a study run with `moetune submit` in the same root
    cli.mkdir()
    (cli / "study.db").write_bytes(b"the CLI study's only copy")
    status, body = server.call("POST", "/api/v1/studies",
                               {"spec": SPEC.format(name="cli-made", n=1)})
    assert status == 422 and body["field"] == "study.name" and "folder" in body["detail"]
    assert server.call("GET", "/api/v1/studies/cli-made")[0] == 404  # nothing was created
    assert (cli / "study.db").read_bytes() == b"the CLI study's only copy"
    submit(server, "marked", n=1)
    server.wait_state("marked", ("finished",))
    (server.root / "marked" / "notes.txt").write_text("made by the service's study")
    assert server.call("DELETE", "/api/v1/studies/marked")[0] == 204
    assert not (server.root / "marked").exists()  # the service made it: removed
    submit(server, "unmarked", n=1)
    server.wait_state("unmarked", ("finished",))
    (server.root / "unmarked" / ".moetune-service").unlink()  # as if made by someone else
    assert server.call("DELETE", "/api/v1/studies/unmarked")[0] == 204
    assert (server.root / "unmarked").is_dir()  # the study is gone, the folder kept


def test_a_study_name_the_service_cannot_address_does_not_break_the_list(server):
    storage = optuna.storages.RDBStorage(f"sqlite:///{server.root / 'service.db'}")
    optuna.create_study(study_name="made elsewhere / odd name!", storage=storage)
    status, body = server.call("GET", "/api/v1/studies")
    assert status == 200, body
    assert "made elsewhere / odd name!" not in [s["name"] for s in body]


def test_errors_about_files_outside_the_data_roots_say_nothing_about_them(server):
    def detail(path: str) -> str:
        spec = SPEC.format(name="probe", n=1) + f"[model]\nfull = '{path}'\n"
        status, body = server.call("POST", "/api/v1/studies", {"spec": spec})
        assert status == 422
        return str(body["detail"]).replace(path, "PATH")

    exists = sys.executable  # a file that is there
    assert detail(exists) == detail("/no/such/file.json") == detail("/etc/../etc/hostname")


def test_a_law_study_runs_every_budget_on_the_service(server):
    """Its driver runs the budgets one after the other, each a study in the service's storage,
    and the study ends finished when the last has (no held-out budget here, to stay short).
    Its page's grid fills in as it runs, with the same fit law.md reports."""
    law = ("[law]\ntokens = [1_000, 3_000, 10_000, 32_000]\ntrials = 6\n"
           "[budget]\n").join(SPEC.format(name="lw", n=6).split("[budget]\n"))
    status, body = server.call("POST", "/api/v1/studies", {"spec": law})
    assert status == 201, body
    seen: set[tuple[str, ...]] = set()  # the budgets' states, as the page saw them
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        status, d = server.call("GET", "/api/v1/studies/lw")
        assert status == 200, d
        if d["law"]:
            seen.add(tuple(b["state"] for b in d["law"]["budgets"]))
        if d["state"] in ("finished", "failed", "interrupted"):
            break
        time.sleep(0.3)
    assert d["state"] == "finished", d
    grid = d["law"]
    assert [b["tokens"] for b in grid["budgets"]] == [1_000, 3_000, 10_000, 32_000]
    # what the page's law() reads (tests/tuner/test_service_auth.py draws such a grid)
    assert {"tokens", "state", "held_out", "done", "total", "running", "optimum", "best",
            "error", "in_lr_law"} <= set(grid["budgets"][0])
    placed = [b["optimum"] for b in grid["budgets"] if b["optimum"]]
    assert placed and {"lr", "lr_interval", "batch", "batch_placed", "at_edge"} <= set(placed[0])
    assert {"lr_law", "predicted", "held_out_check"} <= set(grid)
    assert all(b["state"] == "done" and b["done"] == b["total"] == 6 for b in grid["budgets"])
    # filling in: a budget searching while a later one waits, seen along the way
    assert any("searching" in states and states[-1] == "waiting" for states in seen), seen
    storage = optuna.storages.RDBStorage(f"sqlite:///{server.root / 'service.db'}")
    from tuner.study.store.storage import stored_spec
    from tuner.study.workflows.law_fit import law_fit_at

    fit = law_fit_at(stored_spec(optuna.load_study(study_name="lw", storage=storage)),
                     f"sqlite:///{server.root / 'service.db'}").to_dict()
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


def test_a_ladder_climbs_on_the_service(server):
    ladder = SPEC.format(name="lad", n=3) + "[ladder]\nwidths = [32, 64]\npromote = 0.34\n"
    status, body = server.call("POST", "/api/v1/studies", {"spec": ladder})
    assert status == 201, body
    d = server.wait_state("lad", ("finished", "failed", "interrupted"), timeout_s=300)
    assert d["state"] == "finished", d
    # its page lists the rungs: both widths done, each with its own best trial
    rungs = d["ladder"]["rungs"]
    assert [(r["width"], r["state"]) for r in rungs] == [(32, "done"), (64, "done")], rungs
    assert all(r["done"] == r["total"] >= 1 and r["best"]["objective"] == "val_loss"
               for r in rungs), rungs
    storage = optuna.storages.RDBStorage(f"sqlite:///{server.root / 'service.db'}")
    top = optuna.load_study(study_name="lad.w64", storage=storage)
    own = [t for t in top.trials if t.state == TrialState.COMPLETE
           and not str(t.user_attrs.get(records.ORIGIN, "")).startswith(records.WARM_START)]
    assert len(own) >= 1  # the promoted candidate(s) trained at the top width
