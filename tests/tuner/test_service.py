"""`moetune serve` as a team uses it, the integration tier: a real server process with its own
Ray, fake trainers to keep it fast.

submit → live progress over HTTP → finished on Ray → report and export; a chunked body held to the
size limit by the real HTTP server; the page's download equal to the CLI's files, locally and
with ``--server``; the CLI against it; the service SIGKILLed mid-study and restarted: the study
finishes with no trial lost or left RUNNING; unsafe setups refused at start. The API's contract
(bad input, cancel, resume, delete, the dashboard, laws and ladders) runs in process, in
test_service_api.py."""

from __future__ import annotations

import http.client
import io
import json
import socket
import subprocess
import sys
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
    req = urllib.request.Request(f"{server.url}/api/v1/studies/{name}/events",
                                 headers={"Authorization": f"Bearer {server.local_token}"})
    with urllib.request.urlopen(req, timeout=180) as r:
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


def chunked_post(server: Server, path: str, chunks: list[bytes], *, end: bool,
                 content_type: str = "application/json") -> tuple[int, dict]:
    """POST a body in chunks (Transfer-Encoding: chunked, no Content-Length); ``end=False``
    leaves the body unfinished, so only a server that answers before reading it all answers."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {server.local_token}\r\nContent-Type: {content_type}"
                  "\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        for chunk in chunks:
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if end:
            s.sendall(b"0\r\n\r\n")
        response = http.client.HTTPResponse(s)
        response.begin()
        return response.status, json.loads(response.read())


def test_an_open_service_answers_its_starting_user_alone(server):
    """No access token exists: a request without the token in ROOT/local.token (readable by
    the user who started the service alone) is refused, whatever it asks."""
    assert server.local_token
    assert server.call("GET", "/api/v1/whoami", token="")[0] == 401
    assert server.call("DELETE", "/api/v1/studies/flow", token="")[0] == 401
    assert server.call("GET", "/api/v1/whoami", token="guess")[0] == 401
    assert server.call("GET", "/api/v1/whoami") == (200, {"user": "local", "admin": True})


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


def download(server: Server, path: str, body: bytes, content_type: str) -> tuple[int, dict, bytes]:
    """(status, headers, raw body) of a POST whose answer may be a zip."""
    req = urllib.request.Request(server.url + path, data=body, method="POST")
    req.add_header("Content-Type", content_type)
    req.add_header("Authorization", f"Bearer {server.local_token}")
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
def test_the_page_export_downloads_every_file_the_cli_writes(server, tmp_path, capsys, fmt,
                                                              monkeypatch):
    monkeypatch.setenv("MOETUNE_TOKEN", server.local_token)
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
        assert list(got) == [f"{stem}.json", f"{stem}.{fmt}.moetune.json"]
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


def test_the_cli_talks_to_the_service(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MOETUNE_TOKEN", server.local_token)  # the starting user's, as its root
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
