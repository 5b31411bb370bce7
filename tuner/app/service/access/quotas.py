"""Per-user quotas on `moetune serve`, so that one user cannot take the service from the others:
the studies a user keeps, the trainings their running studies run at once, and the bytes their
run folders hold under the root.

The operator sets everyone's limits (``serve --quota-studies``, ``--quota-trainings``,
``--quota-disk-gb``) and a user's own (``--user-quota USER:KIND=N``, repeatable); an admin is
not limited. 0 is no limit. Each limit is judged as follows:

    studies    at submit: the studies the user owns in the service's storage (ended ones
               included, until deleted; a law or a ladder is one), 429 past it
    trainings  at submit: a study whose ``max_concurrent`` alone is above it (it could never
               start), 429; when the queue starts a study: the ``max_concurrent`` of the
               user's studies that hold a driver, plus this one's, must fit, else it waits
               queued while other users' studies start
    disk       at submit and resume: the bytes under the root in the run folders the service
               made for the user's studies (reports included; links not followed), 507 once
               they reach it. A running study may pass it: its user then starts nothing new
               until they delete
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.app.service.access.tokens import TokenStore

GB = 10**9
KINDS = ("studies", "trainings", "disk-gb")  # `--user-quota USER:KIND=N`


@dataclass(frozen=True, kw_only=True)
class Limits:
    """One user's limits (0: none). The defaults are `moetune serve`'s."""

    studies: int = 100
    trainings: int = 16  # trainings at once, over the user's running studies
    disk_bytes: int = 20 * GB


@dataclass(frozen=True, kw_only=True)
class Quotas:
    """Everyone's limits and the users' own (``users``, set by the operator)."""

    default: Limits = Limits()
    users: Mapping[str, Limits] = dataclasses.field(default_factory=dict)

    def of(self, user: str, *, admin: bool) -> Limits | None:
        """``user``'s limits; None for an admin, who is not limited."""
        return None if admin else self.users.get(user, self.default)


@dataclass(frozen=True, kw_only=True)
class Held:
    """What a user holds now."""

    studies: int
    disk_bytes: int


class QuotaExceeded(Exception):
    """A request past a user's quota: ``status`` 429 (a count) or 507 (disk); ``field``
    names the limit (``quota.studies``, ``quota.trainings``, ``quota.disk``)."""

    def __init__(self, message: str, *, field: str, status: int) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def check_submit(limits: Limits | None, user: str, held: Held, max_concurrent: int) -> None:
    """A new study for ``user`` against their ``limits`` (None: an admin).

    Raises:
        QuotaExceeded: naming the limit, its flag and value, and what the user holds.
    """
    if limits is None:
        return
    if limits.studies and held.studies >= limits.studies:
        raise QuotaExceeded(f"quota.studies: a user may keep at most {limits.studies} studies "
                            f"on this service (serve --quota-studies), but {user!r} has "
                            f"{held.studies}; delete ended ones first.",
                            field="quota.studies", status=429)
    if limits.trainings and max_concurrent > limits.trainings:
        raise QuotaExceeded(f"quota.trainings: a user's studies may run at most "
                            f"{limits.trainings} trainings at once on this service (serve "
                            f"--quota-trainings), but study.max_concurrent is "
                            f"{max_concurrent}.", field="quota.trainings", status=429)
    check_disk(limits, user, held)


def check_disk(limits: Limits | None, user: str, held: Held) -> None:
    """``user``'s run folders against their disk limit (None: an admin).

    Raises:
        QuotaExceeded: a 507 naming the limit and the bytes held.
    """
    if limits is not None and limits.disk_bytes and held.disk_bytes >= limits.disk_bytes:
        raise QuotaExceeded(f"quota.disk: a user's run folders may hold at most "
                            f"{limits.disk_bytes / GB:g} GB on this service (serve "
                            f"--quota-disk-gb), but {user!r}'s hold "
                            f"{held.disk_bytes / GB:.3g} GB; delete ended studies first.",
                            field="quota.disk", status=507)


def may_start(limits: Limits | None, running: int, max_concurrent: int) -> bool:
    """Whether a study of ``max_concurrent`` trainings may start while its user's running
    studies hold ``running``."""
    return limits is None or not limits.trainings or running + max_concurrent <= limits.trainings


def folder_bytes(folders: Iterable[Path]) -> int:
    """The bytes of every file under ``folders``, links not followed (a link counts as itself:
    a folder linked from elsewhere is not the user's to be charged for)."""
    total = 0
    for folder in folders:
        for top, dirs, files in os.walk(folder):  # os.walk follows no link to a folder
            for name in (*dirs, *files):
                try:
                    total += os.lstat(os.path.join(top, name)).st_size
                except OSError:  # removed meanwhile
                    continue
    return total


def user_limits(pairs: Iterable[str], default: Limits) -> dict[str, Limits]:
    """``--user-quota USER:KIND=N`` values as {user: their limits} (the others default's).

    Raises:
        ValueError: a value that is not USER:KIND=N with a known KIND and N >= 0, naming the
            flag, the rule and the value.
    """
    out: dict[str, Limits] = {}
    for pair in pairs:
        user, _, rest = pair.rpartition(":")
        kind, _, number = rest.partition("=")
        try:
            value = float(number) if kind == "disk-gb" else int(number)
        except ValueError:
            value = -1
        if not (user and user.strip() == user and user.isprintable() and kind in KINDS
                and value >= 0):
            raise ValueError(f"--user-quota: must be USER:KIND=N with KIND one of "
                             f"{list(KINDS)} and N >= 0 (0: no limit), but got {pair!r}.")
        field = {"disk-gb": "disk_bytes"}.get(kind, kind)
        amount = int(value * GB) if kind == "disk-gb" else int(value)
        out[user] = dataclasses.replace(out.get(user, default), **{field: amount})
    return out


def owner_limits(quotas: Quotas, tokens: TokenStore, *, local: str
                 ) -> Callable[[str], Limits | None]:
    """The limits of a study's owner by name, for the queue, which has no request to read the
    admin flag from: an owner holding an admin token that is not revoked, or the open mode's
    user ``local`` (`auth.LOCAL`) while no token exists, is an admin."""

    def of(owner: str) -> Limits | None:
        infos = tokens.users()
        admin = (any(t.user == owner and t.admin and not t.revoked_at for t in infos)
                 or (owner == local and not infos))
        return quotas.of(owner, admin=admin)

    return of
