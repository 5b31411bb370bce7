"""A `moetune serve` bound beyond loopback, probed as an attacker would: the files it creates,
what its local Ray listens on, forged and foreign-origin sessions, sign-out, and revoking every
token while it runs (it must stay closed). One real server process with the fake trainers."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from service_process import SPEC, Server

from tests.utils.waiting import wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and `ss` (Linux)")


def moetune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory):
    root = tmp_path_factory.mktemp("exposed") / "root"
    tokens = {}
    for user, admin in (("ops", True), ("eve", False)):
        out = moetune("token", "create", user, "--root", str(root), *(["--admin"] * admin))
        assert out.returncode == 0, out.stderr
        tokens[user] = out.stdout.strip()
    srv = Server(root, extra=("--host", "0.0.0.0", "--request-deadline", "2", "--max-trials", "20",
                              "--max-tokens-per-trial", "10000",
                              "--max-concurrent-trials", "2")).start()
    yield srv, tokens
    srv.stop()


class Browser:
    """Form posts and a cookie sent to the real server, as a browser sends them (redirects
    not followed)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookie = ""

    def request(self, method: str, path: str, form: dict[str, str] | None = None
                ) -> tuple[int, str, dict[str, str]]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if form is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self.cookie:
            req.add_header("Cookie", self.cookie)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=60) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def sign_in(srv: Server, token: str) -> Browser:
    b = Browser(srv.url)
    status, _, headers = b.request("POST", "/signin", {"token": token})
    assert status == 303, status
    b.cookie = headers["set-cookie"].split(";")[0]
    return b


def test_the_root_and_every_file_in_it_are_private(exposed):
    srv, tokens = exposed
    status, _ = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="files", n=2)},
                         token=tokens["eve"])
    assert status == 201
    srv.wait_state("files", ("finished",), token=tokens["eve"])
    assert stat.S_IMODE(srv.root.stat().st_mode) == 0o700
    # Ray makes its session folders 0777 on purpose; under ROOT/.ray (0700, when its socket
    # paths fit there) no other user reaches them: the folder itself is checked, not its inside
    seen = [p for p in srv.root.rglob("*") if not p.is_symlink()
            and ".ray" not in p.relative_to(srv.root).parts[:-1]]
    assert {"service.db", "csrf.key", "ray.token"} <= {p.name for p in seen}
    assert list(srv.root.glob("files/ray/*"))  # the study's run folder was written
    loose = [f"{p} {oct(stat.S_IMODE(p.stat().st_mode))}" for p in seen
             if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert loose == []
    db = (srv.root / "service.db").read_bytes()
    for secret in ((srv.root / "csrf.key").read_text(), (srv.root / "ray.token").read_text(),
                   *tokens.values()):
        assert secret.encode() not in db


def _listening(pids: set[str]) -> list[tuple[str, str]]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        pid = re.search(r"pid=(\d+),", line)
        if pid and pid.group(1) in pids:
            found.append((line.split()[3], re.search(r'\(\("([^"]+)"', line).group(1)))
    return found


@pytest.mark.skipif(subprocess.run(["which", "ss"], capture_output=True).returncode != 0,
                    reason="`ss` (iproute2) is not installed")
def test_the_local_ray_listens_on_loopback_only_and_wants_its_token(exposed):
    srv, _ = exposed
    assert srv.proc is not None
    pids = set(subprocess.run(["pgrep", "-s", str(srv.proc.pid)], capture_output=True,
                              text=True).stdout.split())
    sockets = _listening(pids)
    names = {name for _, name in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # Ray's own servers were seen...
    beyond = [(addr, name) for addr, name in sockets
              if not addr.endswith(f":{srv.port}") and not re.match(
                  r"^(127\.[\d.]+|\[::ffff:127\.[\d.]+\]|\[::1\]):\d+$", addr)]
    assert beyond == []  # ...and none, but the HTTP port asked for, beyond loopback
    raylet = next(p for p in pids if Path(f"/proc/{p}/comm").exists()
                  and Path(f"/proc/{p}/comm").read_text().strip() == "raylet")
    env = dict(kv.split("=", 1) for kv in
               Path(f"/proc/{raylet}/environ").read_text().split("\0") if "=" in kv)
    assert env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN_PATH"] == str(srv.root / "ray.token")
    # Ray's sockets (and logs) sit in 0777 folders; a folder above them is ours alone
    args = Path(f"/proc/{raylet}/cmdline").read_text().split("\0")
    socket_path = Path(next(a for a in args if "sockets/raylet" in a).split("=", 1)[-1])
    private = [p for p in socket_path.parents if p.is_dir() and p.stat().st_uid == os.getuid()
               and not stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert any(p.name.startswith(("moetune-ray-", ".ray")) for p in private), socket_path


def test_a_made_up_session_cookie_is_nobody(exposed):
    srv, _ = exposed
    forged = "mallory|1|9999999999|" + "0" * 64
    status, _ = srv.call("DELETE", "/api/v1/studies/files",
                         headers={"Cookie": f"moetune_session={forged}"})
    assert status == 401


def test_a_cookie_from_another_origin_changes_nothing(exposed):
    srv, tokens = exposed
    b = sign_in(srv, tokens["eve"])
    status, _ = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="xorigin", n=2)},
                         headers={"Cookie": b.cookie, "Origin": "http://evil.example"})
    assert status == 403
    status, _ = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="xorigin", n=2)},
                         headers={"Cookie": b.cookie})  # no Origin, no CSRF header
    assert status == 403
    # a form-encoded post from a page elsewhere, as a browser sends it
    status, _ = srv.call("POST", "/api/v1/studies/files/resume", raw=b"x=1",
                         headers={"Cookie": b.cookie, "Origin": "http://evil.example",
                                  "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 403
    assert srv.call("GET", "/api/v1/studies/xorigin", token=tokens["eve"])[0] == 404
    # the same cookie from the service's own page origin is the user
    status, body = srv.call("GET", "/api/v1/whoami", headers={"Cookie": b.cookie})
    assert status == 200 and body["user"] == "eve"
    status, _ = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="xorigin", n=1)},
                         headers={"Cookie": b.cookie, "Origin": srv.url})
    assert status == 201
    # signing a browser in from another site (login CSRF) is refused
    status, _ = srv.call("POST", "/signin", raw=urllib.parse.urlencode(
        {"token": tokens["eve"]}).encode(), headers={
            "Origin": "http://evil.example",
            "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 403


def test_sign_out_ends_the_session_on_the_server(exposed):
    srv, tokens = exposed
    b = sign_in(srv, tokens["eve"])
    status, page, _ = b.request("GET", "/submit")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    assert b.request("POST", "/signout", {"csrf": csrf})[0] == 303
    # the browser forgets the cookie; one kept by an attacker is dead too
    assert srv.call("GET", "/api/v1/whoami", headers={"Cookie": b.cookie})[0] == 401


def test_pages_cannot_be_framed_and_load_nothing_from_elsewhere(exposed):
    srv, tokens = exposed
    status, page, headers = Browser(srv.url).request("GET", "/signin")
    headers = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "default-src 'self'" in headers["content-security-policy"]
    status, _ = srv.call("GET", "/api/v1/whoami", token=tokens["eve"])
    assert status == 200
    status, body = srv.call("GET", "/docs", token=tokens["eve"])  # no Swagger UI from a CDN
    assert "swagger" not in str(body).lower() and "cdn" not in str(body).lower()
    assert srv.call("GET", "/openapi.json")[0] == 401  # the description, like every route,
    assert srv.call("GET", "/openapi.json", token=tokens["eve"])[0] == 200  # needs a token


@pytest.mark.parametrize("change, field", [
    (("n_trials = {n}", "n_trials = 21"), "study.n_trials"),
    (("tokens_per_trial = 300", "tokens_per_trial = 10100"), "budget.tokens_per_trial"),
    (("max_concurrent = 2", "max_concurrent = 3"), "study.max_concurrent"),
])
def test_the_operators_caps_refuse_a_spec_above_them(exposed, change, field):
    srv, tokens = exposed
    spec = SPEC.replace(*change).format(name="greedy", n=2)
    status, body = srv.call("POST", "/api/v1/studies", {"spec": spec}, token=tokens["eve"])
    assert status == 422 and body["field"] == field and "on this service" in body["detail"]
    assert srv.call("GET", "/api/v1/studies/greedy", token=tokens["eve"])[0] == 404


@pytest.mark.parametrize("half", [
    b"GET /api/v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # headers never finished
    b"POST /api/v1/studies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{",
])
def test_a_half_sent_request_is_cut_off_at_the_deadline(exposed, half):
    srv, tokens = exposed
    with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:
        s.sendall(half)
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # closed by the service (a timeout here raises)
        assert time.monotonic() - t0 < 14
    assert srv.call("GET", "/api/v1/whoami", token=tokens["eve"])[0] == 200  # others served


def _wait_status(srv: Server, expect: int, **kw) -> int:
    deadline = time.monotonic() + 10
    status = 0
    while time.monotonic() < deadline:
        status = srv.call(**kw)[0]
        if status == expect:
            return status
        time.sleep(0.25)
    return status


def test_revoking_every_token_keeps_the_service_closed(exposed):
    """Last: it revokes every token of the module's server."""
    srv, tokens = exposed
    b = sign_in(srv, tokens["ops"])
    assert srv.call("GET", "/api/v1/whoami", token=tokens["eve"])[0] == 200
    for user in ("eve", "ops"):
        out = moetune("token", "revoke", user, "--root", str(srv.root))
        assert out.returncode == 0, out.stderr
    # Each token and session is cached on its own for up to auth.CACHE_S, so each is waited for
    # (eve's entry was refreshed after the ops session's: it can outlive it by that much).
    for who in ({"token": tokens["ops"]}, {"token": tokens["eve"]},
                {"headers": {"Cookie": b.cookie}}):
        assert _wait_status(srv, 401, method="GET", path="/api/v1/whoami", **who) == 401
    assert srv.call("GET", "/api/v1/studies")[0] == 401  # no token: not the local admin
    status, _ = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="open", n=1)})
    assert status == 401
    listed = moetune("token", "list", "--root", str(srv.root)).stdout
    rows = [line.split("\t") for line in listed.splitlines()[1:]]
    assert [r[0] for r in rows] == ["ops", "eve"] and all(r[4] != "-" for r in rows)
    assert all(r[3] != "never" for r in rows)  # both were used before they were revoked
    out = moetune("token", "revoke", "eve", "--root", str(srv.root))
    assert out.returncode == 2 and "has none" in out.stderr
    assert os.path.exists(srv.root / "service.db")


def test_a_password_in_the_specs_storage_is_not_pickled(tmp_path):
    """Ray Tune pickles the searcher into tuner.pkl; a spec that names its database
    (``[study] storage``) goes with it, masked."""
    import pickle

    from trainers import ModelArgs
    from tuner.study.specs.spec import spec_from_dict
    from tuner.study.store import database as db
    from tuner.study.store import storage as st
    from tuner.study.trial.samplers import make_sampler
    from tuner.study.trial.searcher import StudySearcher

    secret = "Pw-in-the-spec-71c2"
    spec = spec_from_dict({
        "study": {"name": "named", "n_trials": 2,
                  "storage": f"postgresql://moetune:{secret}@db.example:5432/moetune"},
        "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
        "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2}}}})
    study = st.create_study(spec, db.open_storage(db.storage_url(tmp_path)), make_sampler(spec))
    blob = pickle.dumps(StudySearcher(study=study, spec=spec, model_args=ModelArgs(),
                                      n_to_run=2))
    assert secret.encode() not in blob
    assert pickle.loads(blob)._spec.study.storage.startswith("postgresql://moetune:***@")
    assert spec.study.storage.endswith("@db.example:5432/moetune")  # the live spec keeps it


@pytest.mark.skipif(subprocess.run(["which", "ss"], capture_output=True).returncode != 0,
                    reason="`ss` (iproute2) is not installed")
def test_the_clis_local_ray_listens_on_loopback_only(tmp_path):
    """`moetune submit` without --address starts its own Ray: nothing of it beyond loopback."""
    import os
    import signal
    import time

    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(name="cli-ray", n=4))
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "submit", str(spec), "--root",
                             str(tmp_path / "runs"), "--trainer", "tuner.testing:slow_train",
                             "--no-progress"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, sockets = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            pids = set(subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True,
                                      text=True).stdout.split())
            sockets = _listening(pids)
            if {"gcs_server", "raylet"} <= {name for _, name in sockets}:
                break
            time.sleep(1.0)
        assert {"gcs_server", "raylet"} <= {name for _, name in sockets}, sockets
        beyond = [(addr, name) for addr, name in sockets if not re.match(
            r"^(127\.[\d.]+|\[::ffff:127\.[\d.]+\]|\[::1\]):\d+$", addr)]
        assert beyond == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _holding(folder: str) -> dict[int, str]:
    """{pid: comm} of this user's live processes with a file open under ``folder`` (every
    process of a Ray keeps its logs open in its session folder); the dead left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if (not entry.name.isdigit() or entry.stat().st_uid != os.getuid()
                    or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"):
                continue
            if any(os.readlink(fd).startswith(folder) for fd in (entry / "fd").iterdir()):
                found[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:
            continue
    return found


def _children(pid: int) -> dict[int, str]:
    """{pid: cmdline} of ``pid``'s children."""
    out = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1]
                                            .split()[1]) == pid:
                out[int(entry.name)] = (entry / "cmdline").read_text().replace("\0", " ")
        except OSError:
            continue
    return out


def test_a_killed_services_ray_goes_with_it(tmp_path):
    """kill -9 of serve alone: the raylet's dashboard and runtime-env agents had lived on for
    about 60 s (reporting the raylet's death to the dead GCS), one listening on loopback; the
    service's reaper ends every process of its Ray and then exits."""
    srv = Server(tmp_path / "root").start()
    try:
        assert srv.proc is not None
        children = _children(srv.proc.pid)
        gcs = next(c for c in children.values() if "gcs_server" in c)
        session = re.search(r"--log_dir=(\S+)/logs", gcs).group(1)
        agents = {"ray::DashboardA", "ray::RuntimeEnv"}  # comm: 15 characters
        wait_until(lambda: agents <= set(_holding(session).values()),
                   what="the raylet's agents started", timeout=120)
        os.kill(srv.proc.pid, signal.SIGKILL)  # the service alone, not its process group
        srv.proc.wait(timeout=30)
        for pid, cmd in children.items():  # it exits once every process of the Ray is gone
            if "ray_reaper" in cmd:
                wait_until(lambda pid=pid: not Path(f"/proc/{pid}/status").exists()
                           or "State:\tZ" in Path(f"/proc/{pid}/status").read_text(),
                           what="the reaper's end", timeout=60)
        assert _holding(session) == {}
    finally:
        srv.kill()


def test_quotas_widths_links_and_stage_names_on_a_real_service(tmp_path):
    """A real `moetune serve` with its quota, width and data-root flags: a user's second study
    past --quota-studies 1 is a 429 naming it while another user's first is queued; a plain
    study of proxy-l (dim 1024) past --max-width 64 is refused; a folder corpus with a file
    linked from outside the data roots is refused and nothing of it read; a name shaped like
    a law's budget is refused."""
    root, data = tmp_path / "root", tmp_path / "data"
    (data / "dir").mkdir(parents=True)
    (data / "dir" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    (tmp_path / "secret.txt").write_text("outside-secret " * 400)
    (data / "dir" / "zz_link.txt").symlink_to(tmp_path / "secret.txt")
    tokens = {}
    for user in ("alice", "bob"):
        out = moetune("token", "create", user, "--root", str(root))
        assert out.returncode == 0, out.stderr
        tokens[user] = out.stdout.strip()
    srv = Server(root, extra=("--quota-studies", "1", "--max-width", "64",
                              "--data-root", str(data))).start()
    try:
        def submit(user: str, spec: str) -> tuple[int, dict]:
            return srv.call("POST", "/api/v1/studies", {"spec": spec}, token=tokens[user])

        assert submit("alice", SPEC.format(name="first", n=1))[0] == 201
        status, body = submit("alice", SPEC.format(name="second", n=1))
        assert status == 429 and body["field"] == "quota.studies", body
        assert "--quota-studies" in body["detail"]
        status, body = submit("bob", SPEC.format(name="wide", n=1)
                              + '[model]\npreset = "proxy-l"\n')
        assert status == 422 and body["field"] == "model.preset", body
        status, body = submit("bob", SPEC.format(name="linked", n=1)
                              + f'[data]\ncorpus = "{data / "dir"}"\n')
        assert status == 422 and body["field"] == "data.corpus", body
        status, body = submit("bob", SPEC.format(name="victim.t1000", n=1))
        assert status == 422 and body["field"] == "study.name", body
        assert submit("bob", SPEC.format(name="bobs", n=1))[0] == 201  # none of them counted
        leaked = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                  and b"outside-secret" in p.read_bytes()]
        assert leaked == []
    finally:
        srv.stop()
