"""The command line against a service: ``--server URL`` (or ``$MOETUNE_SERVER``) sends
``submit``, ``status``, ``list``, ``cancel``, ``delete``, ``resume``, ``report`` and ``export``
to a running ``moetune serve`` with the same exit codes as locally (2: the service refused the
input, naming the field; 1: it could not be reached or failed). The token comes from
``$MOETUNE_TOKEN`` (not a flag: a flag would show in the process list); for a service on
loopback without it, the local token the same user's ``moetune serve`` wrote (`token_for`).

A remote ``submit`` returns once the study is queued, and says how to follow it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any

from tuner.app.requests.errors import UsageError
from tuner.app.service.access.private import LOCAL_TOKEN_FILE

TIMEOUT_S = 60


class RemoteError(RuntimeError):
    """The service could not be reached or failed (exit 1)."""


def add_server_options(subparsers: argparse._SubParsersAction) -> None:
    """``--server`` on every command a service also answers."""
    for name in REMOTE_COMMANDS:
        parser = subparsers.choices.get(name)
        if parser is not None:
            parser.add_argument("--server", default=os.environ.get("MOETUNE_SERVER", ""),
                                help="a moetune service's URL (default: $MOETUNE_SERVER); the "
                                     "token comes from $MOETUNE_TOKEN")


def remote_dispatch(args: argparse.Namespace) -> int:
    """Run ``args.command`` against ``args.server``."""
    client = Client(args.server, token_for(args))
    try:
        return int(COMMANDS[args.command](client, args))
    except RemoteError as e:
        print(f"moetune {args.command}: {e}", file=sys.stderr)
        return 1


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def token_for(args: argparse.Namespace) -> str:
    """``$MOETUNE_TOKEN``; without it, for a service on loopback, the local token its own user
    started it with (``ROOT/local.token``, 0600 in the 0700 root: only that user reads it, as
    Jupyter's runtime file), so `moetune serve &` then ``--server http://127.0.0.1:8470`` works
    for the user who started it and for no one else. Read into memory, never written."""
    token = os.environ.get("MOETUNE_TOKEN", "")
    host = urllib.parse.urlsplit(args.server).hostname or ""
    if token or host not in LOOPBACK:
        return token
    root = Path(args.root)  # every command a service answers has --root (where_options)
    try:
        return (root / LOCAL_TOKEN_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


class Client:
    """JSON over HTTP with the bearer token; 4xx → UsageError (exit 2), else RemoteError."""

    def __init__(self, server: str, token: str) -> None:
        if not server.startswith(("http://", "https://")):
            raise UsageError(f"--server: must be an http:// or https:// URL, but got {server!r}.")
        self.server = server.rstrip("/")
        self._token = token

    def call(self, method: str, path: str, body: Any = None) -> bytes:
        return self.response(method, path, body)[0]

    def response(self, method: str, path: str, body: Any = None
                 ) -> tuple[bytes, str, Mapping[str, str]]:
        """(body, content type, headers) of one request."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return (bytes(response.read()), str(response.headers.get("Content-Type", "")),
                        response.headers)
        except urllib.error.HTTPError as e:
            detail = _detail(e.read())
            if 400 <= e.code < 500:
                raise UsageError(detail) from None
            raise RemoteError(f"the service failed ({e.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            raise RemoteError(f"cannot reach {self.server} ({e}).") from None

    def json(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self.call(method, path, body) or b"null")


def _detail(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:300]
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's validation errors
        return "; ".join(f"{'.'.join(str(x) for x in d.get('loc', []))}: {d.get('msg')}"
                         for d in detail)
    return str(detail)


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _submit(client: Client, args: argparse.Namespace) -> int:
    from tuner.app.requests.submit import SubmitRequest

    request = SubmitRequest.from_namespace(args)  # the file read and checked here, as locally
    if request.resume:
        raise UsageError("--resume: a service's submit makes a new study; continue one with "
                         f"`moetune resume NAME --server {client.server}`.")
    out = client.json("POST", "/api/v1/studies", request.body())  # bad TOML refused here
    print(f"study {out['name']} queued on {client.server} (owner {out['owner']}); follow it "
          f"with `moetune status {out['name']} --server {client.server}` or open "
          f"{client.server}/studies/{_q(out['name'])}")
    return 0


def _list(client: Client, args: argparse.Namespace) -> int:
    for s in client.json("GET", "/api/v1/studies"):
        print(s["name"])
    return 0


def _status(client: Client, args: argparse.Namespace) -> int:
    from tuner.app.status import format_table

    if not args.study:
        rows = [{"study": s["name"], "owner": s["owner"], "state": s["state"],
                 "trials": f"{s['progress']['done']}/{s['progress']['total']}",
                 "running": s["progress"]["running"], "best": _best(s["progress"]["best"])}
                for s in client.json("GET", "/api/v1/studies")]
        print(format_table(rows) if rows else "no studies")
        return 0
    d = client.json("GET", f"/api/v1/studies/{_q(args.study)}")
    names = [o["name"] for o in d["objectives"]]
    rows = [{"#": t["number"], "outcome": t["outcome"],
             **{n: t["values"].get(n, "") for n in names}, **t["params"],
             "reason": (t["reason"].strip().splitlines() or [""])[-1][:60]}
            for t in d["trials"]]
    print(status_line(d))
    print(format_table(rows))
    return 0


def status_line(d: dict[str, Any]) -> str:
    """``moetune status STUDY --server``'s first line, from the study's view: its state and
    owner (or what a study run from the command line is), progress and the best trial."""
    from tuner.app.requests.studies import EXTERNAL_WORDS

    who = (EXTERNAL_WORDS if d["state"] == "external" and not d["owner"]
           else f"owner {d['owner']}")
    best = _best(d["progress"]["best"])
    return (f"study {d['name']}: {d['state']} ({who}), "
            f"{d['progress']['done']}/{d['progress']['total']} trials done, "
            f"{d['progress']['running']} running"
            + (f"; best {best}" if best else "; no feasible trial yet"))


def _best(best: dict[str, Any] | None) -> str:
    if not best:
        return ""
    values = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in best["values"].items())
    return f"{values} (#{best['trial']})"


def _cancel(client: Client, args: argparse.Namespace) -> int:
    out = client.json("POST", f"/api/v1/studies/{_q(args.study)}/cancel")
    print(f"study {args.study}: {out['state']}")
    return 0


def _resume(client: Client, args: argparse.Namespace) -> int:
    from tuner.app.requests.actions import ResumeRequest  # Optuna loads only for this command

    request = ResumeRequest.from_namespace(args)
    out = client.json("POST", f"/api/v1/studies/{_q(request.study)}/resume")
    print(f"study {args.study}: {out['state']}")
    return 0


def _delete(client: Client, args: argparse.Namespace) -> int:
    client.call("DELETE", f"/api/v1/studies/{_q(args.study)}")
    print(f"study {args.study}: deleted")
    return 0


def _report(client: Client, args: argparse.Namespace) -> int:
    html = client.call("GET", f"/api/v1/studies/{_q(args.study)}/report")
    out = args.out or Path(f"{args.study}-report")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_bytes(html)
    print(f"report for {args.study!r}: {out / 'report.html'}")
    return 0


def _export(client: Client, args: argparse.Namespace) -> int:
    from tuner.app.export_command import check_out, write_out
    from tuner.app.requests.actions import MESSAGES_HEADER, ExportRequest, local_only

    request = ExportRequest.from_namespace(args)  # refused here as locally, before sending
    check_out(args.out)
    for key in ("law", "recipes"):  # files on this machine: the service reads none of them
        if getattr(args, key, None) is not None:
            raise local_only(key, getattr(args, key))
    body, content_type, headers = client.response(
        "POST", f"/api/v1/studies/{_q(args.study)}/export", request.options())
    files = (_unzip(body) if content_type.startswith("application/zip")
             else {"": body.decode()})
    for line in _messages(headers.get(MESSAGES_HEADER)):  # as the local export says them
        print(f"moetune export: {line}", file=sys.stderr)
    (first, text), *rest = files.items()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    # the files the local export writes: the launch config at --out, the others beside it,
    # named as the service named them after its own launch config's stem
    stem = PurePath(first).stem
    for name, other in reversed(rest):
        write_out(args.out.with_name(args.out.stem + name.removeprefix(stem)
                                     if name.startswith(stem) else name), other)
    write_out(args.out, text)
    print(f"moetune export: wrote {args.out}", file=sys.stderr)
    return 0


def _messages(raw: str | None) -> list[str]:
    """The export's stderr lines a service sent (`actions.MESSAGES_HEADER`); none from a
    service that sends none."""
    try:
        said = json.loads(raw) if raw else []
    except ValueError:
        shown = (raw or "")[:80]
        raise RemoteError(f"the service sent unreadable export messages ({shown!r}).") \
            from None
    if not isinstance(said, list) or not all(isinstance(x, str) for x in said):
        raise RemoteError("the service sent export messages that are not a list of lines.")
    return said


def _unzip(body: bytes) -> dict[str, str]:
    """A zip download's files, in the archive's order; a name with a folder in it is refused
    (nothing is written outside --out's folder)."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        names = archive.namelist()
        if not names or any(PurePath(n).name != n or n in (".", "..") for n in names):
            raise RemoteError(f"the service sent an archive of unexpected files ({names}).")
        return {n: archive.read(n).decode() for n in names}


# the commands a service answers, each by the function that sends it
COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "submit": _submit, "status": _status, "list": _list, "cancel": _cancel, "delete": _delete,
    "resume": _resume, "report": _report, "export": _export,
}
REMOTE_COMMANDS = tuple(COMMANDS)
