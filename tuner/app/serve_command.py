"""``moetune serve`` (the HTTP service) and ``moetune token`` (its access tokens).

    moetune serve                                    # local Ray, runs/service.db, 127.0.0.1:8470
    moetune token create alice                       # prints a token once
    moetune token revoke alice                       # her tokens and sessions end
    moetune serve --host 0.0.0.0 --address 10.0.0.1:6379 \\
        --storage postgresql://moetune@db/moetune      # a team's service on a Ray cluster

Embedded defaults: a local Ray started by the service and a SQLite database in the service's
root. With ``--address`` the drivers run on that cluster as detached actors and survive a
restart of the service; a cluster needs a database every node reaches (PostgreSQL): a SQLite
file is refused. Without ``--address`` Ray lives and dies with the service; a restarted service
finds the studies its drivers were running and queues them again (the storage holds every
finished trial, so nothing is lost).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import socket
import sys
from pathlib import Path

from trainers.config.validation import FieldError
from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.commands import DEFAULT_ROOT
from tuner.app.requests.errors import UsageError
from tuner.app.service.access.private import (
    LOCAL_TOKEN_FILE,
    RAY_TOKEN_FILE,
    SERVICE_DB,
    csrf_key,
    local_token,
    make_private,
    ray_temp_dir,
    secret_file,
)
from tuner.app.service.access.quotas import GB, Limits, Quotas, owner_limits, user_limits
from tuner.app.service.access.tokens import TokenStore
from tuner.app.service.running.ray_reaper import start_reaper
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.study.specs.spec import NAME_RE
from tuner.study.store import database as db

DEFAULT_PORT = 8470


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run the moetune service (HTTP API and web page)")
    p.add_argument("--root", default=os.environ.get("MOETUNE_ROOT", DEFAULT_ROOT),
                   help="folder for run folders and the default database "
                        "(default: $MOETUNE_ROOT or ./runs)")
    p.add_argument("--storage", default=os.environ.get("MOETUNE_STORAGE", ""),
                   help="database URL (default: sqlite ROOT/service.db); pass the password "
                        "through ~/.pgpass or PGPASSWORD, not in the URL")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: %(default)s; beyond loopback needs tokens)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help="default: %(default)s; 0: a free port, printed at start")
    p.add_argument("--address", default=None, help="Ray cluster to run the studies on "
                   "(default: a local Ray started by the service)")
    p.add_argument("--max-running", type=int, default=2,
                   help="studies running at once; the rest wait in the queue (default: "
                        "%(default)s)")
    p.add_argument("--data-root", action="append", default=[], metavar="DIR",
                   help="a folder whose files specs may name (corpus, tokenizer, model "
                        "configs); repeat for more; default: none (only the configs shipped "
                        "with moetune)")
    p.add_argument("--attach", action="append", default=[], metavar="STUDY=OWNER",
                   help="a study run from the command line under --root, owned by OWNER on "
                        "this service: OWNER (and admins) may cancel it from here; repeat for "
                        "more; other command-line studies are listed read-only")
    for flag, what in (("--max-trials", "trainings (every trial of every law budget or "
                                        "ladder rung, and every noise re-training)"),
                       ("--max-tokens-per-trial", "[budget] tokens_per_trial"),
                       ("--max-concurrent-trials", "[study] max_concurrent"),
                       ("--max-width", "model width (dim) of any training: its proxy's, "
                                       "each [ladder] width")):
        p.add_argument(flag, type=int, default=0, metavar="N",
                       help=f"refuse a spec whose {what} is above N (default: 0, no cap)")
    p.add_argument("--quota-studies", type=int, default=Limits().studies, metavar="N",
                   help="studies a user may keep (ended ones until deleted; a law or ladder "
                        "is one); past it a submit is a 429 (default: %(default)s; 0: none)")
    p.add_argument("--quota-trainings", type=int, default=Limits().trainings, metavar="N",
                   help="trainings a user's running studies may run at once (their "
                        "max_concurrent); a study past it waits queued (default: "
                        "%(default)s; 0: none)")
    p.add_argument("--quota-disk-gb", type=float, default=Limits().disk_bytes / GB,
                   metavar="GB", help="bytes a user's run folders may hold under --root, in "
                   "GB (1e9); once reached, their submit and resume are a 507 (default: "
                   "%(default)g; 0: none)")
    p.add_argument("--user-quota", action="append", default=[], metavar="USER:KIND=N",
                   help="USER's own limit, KIND one of studies, trainings, disk-gb; repeat "
                        "for more; admins are not limited")
    p.add_argument("--request-deadline", type=float, default=10.0, metavar="S",
                   help="seconds a client has to send a whole request, headers and body; "
                        "then the connection is closed (default: %(default)s)")
    p.add_argument("--trainer", default="trainers:train",
                   help="MODULE:FUNCTION with trainers.train's signature (default: %(default)s)")
    p.add_argument("--recipes", type=Path, metavar="RECIPES_TOML",
                   help="the team's own past full runs, in the recipe table's form "
                        "(docs/full_run.md): read first by the published recipes' prior of "
                        "every export on this service, as `moetune export --recipes` locally "
                        "(a request cannot name a file)")
    p.set_defaults(handler=serve)

    t = subparsers.add_parser("token", help="create or list the service's access tokens")
    tsub = t.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = tsub.add_parser("create", help="create a token for USER (printed once)")
    c.add_argument("user")
    c.add_argument("--admin", action="store_true", help="may cancel, delete and resume any study")
    c.add_argument("--root", default=os.environ.get("MOETUNE_ROOT", DEFAULT_ROOT))
    c.add_argument("--storage", default=os.environ.get("MOETUNE_STORAGE", ""))
    c.set_defaults(handler=token_create)
    ls = tsub.add_parser("list", help="every token's user, role, creation, last use and "
                         "revocation")
    ls.add_argument("--root", default=os.environ.get("MOETUNE_ROOT", DEFAULT_ROOT))
    ls.add_argument("--storage", default=os.environ.get("MOETUNE_STORAGE", ""))
    ls.set_defaults(handler=token_list)
    r = tsub.add_parser("revoke", help="revoke USER's tokens and end their browser sessions "
                        "(within 2 s on a running service); the service keeps requiring a "
                        "token")
    r.add_argument("user")
    r.add_argument("--root", default=os.environ.get("MOETUNE_ROOT", DEFAULT_ROOT))
    r.add_argument("--storage", default=os.environ.get("MOETUNE_STORAGE", ""))
    r.set_defaults(handler=token_revoke)


def service_url(root: Path, storage: str) -> str:
    return storage or f"sqlite:///{(root / SERVICE_DB).resolve()}"


def _private_root(root: Path, storage: str) -> None:
    """The root 0700 and what this process creates 0600 (`private.make_private`)."""

    if root.exists() and not root.is_dir():
        raise UsageError(f"--root: must be a folder, but {str(root)!r} is a file.")
    make_private(root, None if storage else (root / SERVICE_DB).resolve())


def _token_store(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    root = Path(args.root)
    _private_root(root, args.storage)
    url = service_url(root, args.storage)
    try:
        return TokenStore(db.open_storage(url).engine)
    except db.StorageError as e:
        raise UsageError(str(e)) from None


def token_create(args: argparse.Namespace) -> int:
    try:
        token = _token_store(args).create(args.user, admin=args.admin)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(token)
    print(f"token for {args.user}{' (admin)' if args.admin else ''}: shown once, stored hashed. "
          "Clients send it as 'Authorization: Bearer <token>' (or MOETUNE_TOKEN for the CLI).",
          file=sys.stderr)
    return 0


def token_list(args: argparse.Namespace) -> int:
    print("user\trole\tcreated\tlast used\trevoked")
    for t in _token_store(args).users():
        print(f"{t.user}\t{'admin' if t.admin else 'user'}\t{t.created_at}\t"
              f"{t.last_used_at or 'never'}\t{t.revoked_at or '-'}")
    return 0


def token_revoke(args: argparse.Namespace) -> int:
    try:
        n = _token_store(args).revoke(args.user)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"revoked {n} token{'s' if n != 1 else ''} of {args.user} and ended their sessions; "
          "a running service refuses them within 2 s.", file=sys.stderr)
    return 0


def check_args(args: argparse.Namespace) -> None:
    """The rules of `serve`'s options, before anything starts."""
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port: must be in 0..65535 (0: a free port), but got {args.port}.")
    if args.max_running < 1:
        raise UsageError(f"--max-running: must be >= 1, but got {args.max_running}.")
    if not args.request_deadline > 0:
        raise UsageError(f"--request-deadline: must be > 0 seconds, but got "
                         f"{args.request_deadline}.")
    for flag in ("max_trials", "max_tokens_per_trial", "max_concurrent_trials", "max_width"):
        if getattr(args, flag) < 0:
            raise UsageError(f"--{flag.replace('_', '-')}: must be >= 0 (0: no cap), but got "
                             f"{getattr(args, flag)}.")
    root = Path(args.root)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--root: must be a folder, but {str(root)!r} is a file.")
    for d in args.data_root:
        if not (os.path.isabs(d) and (args.address or Path(d).is_dir())):
            raise UsageError(f"--data-root: must be an absolute path to a folder, but got "
                             f"{d!r}.")
    attach_owners(args.attach)  # the rule, before anything starts
    quotas(args)
    team_recipes(args.recipes)
    if args.address and not args.storage.startswith(("postgresql", "mysql")):
        raise UsageError("--storage: a service on a Ray cluster (--address) needs a database "
                         "every node reaches (postgresql://...); a SQLite file cannot be "
                         f"shared across nodes, but got {args.storage or 'the default SQLite'}.")


def quotas(args: argparse.Namespace) -> Quotas:
    """Everyone's quotas and the users' own, from `serve`'s flags.

    Raises:
        UsageError: a negative limit, or a ``--user-quota`` that is not USER:KIND=N.
    """
    for flag in ("quota_studies", "quota_trainings", "quota_disk_gb"):
        if not getattr(args, flag) >= 0:
            raise UsageError(f"--{flag.replace('_', '-')}: must be >= 0 (0: no limit), but "
                             f"got {getattr(args, flag)}.")
    default = Limits(studies=args.quota_studies, trainings=args.quota_trainings,
                     disk_bytes=int(args.quota_disk_gb * GB))
    try:
        return Quotas(default=default, users=user_limits(args.user_quota, default))
    except ValueError as e:
        raise UsageError(str(e)) from None


def team_recipes(path: Path | None) -> list[str]:
    """The names of the team's own runs in ``--recipes`` (none without it), read as every
    export will read them (`load_recipes`).

    Raises:
        UsageError: the file cannot be read, or a row breaks a rule; the message names the
            row, the column, the rule and the value.
    """
    if path is None:
        return []
    try:
        return [r.name for r in load_recipes(team=path) if r.team]
    except FieldError as e:
        raise UsageError(f"--recipes: {e}") from None


def attach_owners(pairs: list[str]) -> dict[str, str]:
    """``--attach STUDY=OWNER`` values as {study: owner}.

    Raises:
        UsageError: a value that is not STUDY=OWNER with a study name and a user name, or a
            study named twice; the message names the flag, the rule and the value.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        study, _, owner = pair.partition("=")
        if not (NAME_RE.fullmatch(study) and owner and owner.strip() == owner
                and owner.isprintable()):
            raise UsageError(f"--attach: must be STUDY=OWNER (a study name, a user name), but "
                             f"got {pair!r}.")
        if study in out:
            raise UsageError(f"--attach: each study once, but {study!r} is named twice.")
        out[study] = owner
    return out


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_ray_env(root: Path) -> dict[str, str]:
    """The environment that binds a local Ray, started by ``ray.init()`` in this process, to
    loopback and turns its token authentication on, with the token in ``ROOT/ray.token``
    (0600). Read by Ray when it is imported, so set before.

    - ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: Ray then takes the loopback address as the node's
      (``ray/_private/services.py``, ``get_node_ip_address``, in Ray 2.60.0), and its GCS,
      raylet, object manager, workers and runtime-env agent listen on 127.0.0.1 only (seen with
      ``ss -ltnp``; tested in ``tests/tuner/test_service_attacks.py``). Nothing of it can be
      reached from another machine; a local Ray has no other node to reach.
    - ``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN_PATH``: every Ray RPC needs the token, so
      another local user cannot submit work to this Ray either (Ray's default token file,
      ``~/.ray/auth_token``, would be created 0644).
    """

    token = root / RAY_TOKEN_FILE
    secret_file(token)
    return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token)}


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket, bound before Ray starts.

    Ray's processes (GCS, raylet, workers, agents) bind ports of their own while ``ray.init``
    runs; had the service bound after them, one could hold the port it was asked for, and a
    client would reach a Ray gRPC server instead of the service. Bound here, the port is the
    service's from the start, and a port in use is a usage error before anything else starts.

    Raises:
        UsageError: the address cannot be bound (in use, not this machine's, not allowed).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        raise UsageError(f"--host: must be an address of this machine, but got {host!r} "
                         f"({e.strerror or e}).") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise UsageError(f"--port: {host}:{port} cannot be bound ({e.strerror or e}); "
                         "choose another port, or 0 for a free one.") from None
    return sock


def serve(args: argparse.Namespace) -> int:
    check_args(args)
    root = Path(args.root).resolve()
    _private_root(root, args.storage)
    if args.address is None:
        assert "ray" not in sys.modules, "Ray reads these settings when it is imported"
        os.environ.update(local_ray_env(root))
    import ray
    import uvicorn

    from tuner.app.service.access.auth import LOCAL, Auth
    from tuner.app.service.context import Service, ServiceConfig
    from tuner.app.service.running.scheduler import Scheduler
    from tuner.app.service.web import deadline
    from tuner.app.service.web.main import create_app
    url = service_url(root, args.storage)
    try:
        storage = db.open_storage(url)
    except db.StorageError as e:
        raise UsageError(str(e)) from None
    tokens = TokenStore(storage.engine)
    if not is_loopback(args.host) and not tokens.any():
        raise UsageError(f"--host {args.host}: the service listens beyond loopback only with "
                         "access tokens; create one with `moetune token create USER` (same "
                         "--root/--storage) first.")
    ray_temp, ray_fallback = None, None
    if args.address is None:  # Ray's 0777 session folders inside a folder of ours alone
        try:
            ray_temp, ray_fallback = ray_temp_dir(root)
        except ValueError as e:
            raise UsageError(str(e)) from None
    sock = listen(args.host, args.port)  # before Ray's processes take ports of their own
    port = sock.getsockname()[1]
    reaper = None  # kept to the end: its stdin closing with this process starts its reaping
    if ray_temp is not None:  # its Ray's processes end with this one, kill -9 included
        reaper = start_reaper(ray_temp, remove=ray_fallback)
    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             namespace="moetune", _temp_dir=str(ray_temp) if ray_temp else None)
    config = ServiceConfig(root=root, storage_url=url, trainer=args.trainer,
                           max_running=args.max_running, local_ray=args.address is None,
                           data_roots=tuple(Path(d).resolve() for d in args.data_root),
                           max_trials=args.max_trials,
                           max_tokens_per_trial=args.max_tokens_per_trial,
                           max_concurrent_trials=args.max_concurrent_trials,
                           max_width=args.max_width,
                           attach_owners=attach_owners(args.attach), quotas=quotas(args),
                           recipes=args.recipes.resolve() if args.recipes else None)
    scheduler = Scheduler(storage=storage, storage_url=url, root=root, trainer=args.trainer,
                          max_running=args.max_running,
                          data_roots=(*config.data_roots, PUBLISHED_CONFIGS),
                          resolve=config.local_ray,
                          limits_of=owner_limits(config.quotas, tokens, local=LOCAL.name))
    # without access tokens the service is its starting user's alone: they hold local.token
    local = local_token(root) if is_loopback(args.host) else None
    auth = Auth(tokens, csrf_key(root), open_allowed=is_loopback(args.host), local_token=local)
    app = create_app(Service(config, storage, auth, scheduler))
    print(f"moetune service on http://{args.host}:{port}/ (storage {db.shown(url)}; "
          f"Ray {'at ' + args.address if args.address else 'local'})", file=sys.stderr,
          flush=True)
    if config.recipes is not None:
        print(f"every export's prior reads the team's own runs first: "
              f"{', '.join(team_recipes(config.recipes))} (--recipes {config.recipes}; edit it "
              "with the service stopped)", file=sys.stderr, flush=True)
    if local is not None and not tokens.any():
        print(f"no access token exists: the service answers you alone, to requests that carry "
              f"the token in {root / LOCAL_TOKEN_FILE} (sign in with it; the CLI: "
              f"MOETUNE_TOKEN=$(cat {root / LOCAL_TOKEN_FILE}))", file=sys.stderr, flush=True)
    # no access log: a line per request, formatted on the event loop, for 50 clients polling
    # (warnings and errors are still logged)
    # a request's headers and body get --request-deadline seconds (uvicorn has no deadline)
    server = uvicorn.Config(app, log_level="warning", access_log=False,
                            http=deadline.protocol(args.request_deadline))
    try:
        uvicorn.Server(server).run(sockets=[sock])
    finally:
        ray.shutdown()  # its own Ray ends here; a cluster's drivers (detached) keep running
        if ray_fallback is not None:  # a fallback outside the root: nothing of it is kept
            shutil.rmtree(ray_fallback, ignore_errors=True)
        del reaper  # held until here: closing its pipe now, it kills what Ray left behind
    return 0
