"""Bearer tokens and browser sessions for the service, kept in the study database as SHA-256
hashes.

A token is 32 random bytes (URL-safe text), shown once when created (``moetune token create``)
and never stored: the database keeps its hash. Each token has a user name (the owner recorded
on the studies it submits) and may be an admin (who may cancel, delete and resume anyone's
studies). ``moetune token revoke USER`` marks a user's tokens revoked (the rows stay, so a
service that ever had tokens keeps requiring one) and ends their sessions.

A browser session is another random value, sent as the cookie and stored hashed, tied to the
token it was signed in with: the user and the admin flag are read from that token on each
check, so revoking the token or signing out ends the session. Reading the database gives
hashes only: no token, no session cookie, no key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TOUCH_S = 60.0  # a token's last use is written at most this often
_META = sa.MetaData()
TOKENS = sa.Table(
    "moetune_tokens", _META,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("user", sa.String(64), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("admin", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
    sa.Column("last_used_at", sa.String(32), nullable=True),
    sa.Column("revoked_at", sa.String(32), nullable=True),
)
SESSIONS = sa.Table(
    "moetune_sessions", _META,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("token_digest", sa.String(64), nullable=False, index=True),
    sa.Column("expires_at", sa.Float, nullable=False),  # Unix time
)
MAX_SESSIONS_PER_TOKEN = 10  # a sign-in past it ends that token's oldest session
_ADDED_COLUMNS = ("last_used_at", "revoked_at")  # absent from a database made before them
_OLD_SECRETS = "moetune_service_secrets"  # held the session key once; the key is removed


@dataclass(frozen=True)
class User:
    """Who is asking: a token's user, or the single local user of a loopback service with no
    tokens configured."""

    name: str
    admin: bool


@dataclass(frozen=True)
class TokenInfo:
    """One token as ``moetune token list`` shows it (never the token itself)."""

    user: str
    admin: bool
    created_at: str
    last_used_at: str  # '' if never used
    revoked_at: str  # '' while valid


def digest(secret: str) -> str:
    """What the database keeps of a token or a session (and what `auth.Auth` caches by)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class TokenStore:
    """Tokens and sessions in the database at ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        _META.create_all(engine)
        _migrate(engine)

    def create(self, user: str, *, admin: bool = False) -> str:
        """A new token for ``user`` (returned once; only its hash is stored).

        Raises:
            ValueError: ``user`` is not a name of letters, digits, ``_ . -``.
        """
        if not NAME_RE.fullmatch(user):
            raise ValueError(f"user: must be 1-64 letters, digits, '_', '.', '-', but got "
                             f"{user!r}.")
        token = secrets.token_urlsafe(32)
        with self._engine.begin() as con:
            con.execute(TOKENS.insert().values(user=user, digest=digest(token), admin=admin,
                                               created_at=_now()))
        return token

    def revoke(self, user: str) -> int:
        """Revoke every valid token of ``user`` and end their sessions; returns how many.

        Raises:
            ValueError: ``user`` has no valid token.
        """
        with self._engine.begin() as con:
            live = [d for (d,) in con.execute(sa.select(TOKENS.c.digest).where(
                TOKENS.c.user == user, TOKENS.c.revoked_at.is_(None)))]
            if not live:
                raise ValueError(f"user: must have a valid token to revoke, but {user!r} has "
                                 "none (see `moetune token list`).")
            con.execute(TOKENS.update().where(TOKENS.c.digest.in_(live))
                        .values(revoked_at=_now()))
            con.execute(SESSIONS.delete().where(SESSIONS.c.token_digest.in_(live)))
        return len(live)

    def any(self) -> bool:
        """Whether a token was ever created here, revoked ones included (then every request
        must carry a valid one: revoking the last token does not open the service)."""
        with self._engine.connect() as con:
            return con.execute(sa.select(sa.func.count()).select_from(TOKENS)).scalar_one() > 0

    def user(self, token: str) -> User | None:
        """The user a valid token belongs to, or None."""
        return self.user_by_digest(digest(token))

    def user_by_digest(self, hashed: str) -> User | None:
        """The user of the valid token whose `digest` is ``hashed``, or None. Records the use
        (at most every `TOUCH_S`)."""
        with self._engine.connect() as con:
            rows = con.execute(sa.select(TOKENS.c.user, TOKENS.c.admin, TOKENS.c.digest,
                                         TOKENS.c.last_used_at)
                               .where(TOKENS.c.digest == hashed,
                                      TOKENS.c.revoked_at.is_(None))).all()
        for user, admin, stored, used in rows:
            if hmac.compare_digest(stored, hashed):
                self._touch(stored, used)
                return User(name=user, admin=bool(admin))
        return None

    def users(self) -> list[TokenInfo]:
        """Every token (valid and revoked), oldest first, for ``moetune token list``."""
        with self._engine.connect() as con:
            rows = con.execute(sa.select(TOKENS.c.user, TOKENS.c.admin, TOKENS.c.created_at,
                                         TOKENS.c.last_used_at, TOKENS.c.revoked_at)
                               .order_by(TOKENS.c.id)).all()
        return [TokenInfo(user=u, admin=bool(a), created_at=c, last_used_at=lu or "",
                          revoked_at=r or "") for u, a, c, lu, r in rows]

    # -- sessions ----------------------------------------------------------------------------

    def open_session(self, token: str, ttl_s: float) -> str | None:
        """A new session for a valid token (the cookie's value, returned once), or None; the
        token keeps its newest `MAX_SESSIONS_PER_TOKEN` sessions."""
        hashed = digest(token)
        if self.user_by_digest(hashed) is None:
            return None
        session = secrets.token_urlsafe(32)
        with self._engine.begin() as con:
            con.execute(SESSIONS.delete().where(SESSIONS.c.expires_at < time.time()))
            con.execute(SESSIONS.insert().values(digest=digest(session), token_digest=hashed,
                                                 expires_at=time.time() + ttl_s))
            newest_first = con.execute(sa.select(SESSIONS.c.digest)
                                       .where(SESSIONS.c.token_digest == hashed)
                                       .order_by(SESSIONS.c.expires_at.desc())).scalars().all()
            old = newest_first[MAX_SESSIONS_PER_TOKEN:]  # the oldest past the cap end now
            if old:
                con.execute(SESSIONS.delete().where(SESSIONS.c.digest.in_(old)))
        return session

    def session_user(self, hashed: str) -> User | None:
        """The user of the unexpired session whose `digest` is ``hashed``, read from its token
        (None once the token is revoked or the session closed)."""
        with self._engine.connect() as con:
            row = con.execute(sa.select(SESSIONS.c.token_digest, SESSIONS.c.digest)
                              .where(SESSIONS.c.digest == hashed,
                                     SESSIONS.c.expires_at > time.time())).first()
        if row is None or not hmac.compare_digest(row[1], hashed):
            return None
        return self.user_by_digest(row[0])

    def close_session(self, hashed: str) -> None:
        """End the session whose `digest` is ``hashed`` (sign-out)."""
        with self._engine.begin() as con:
            con.execute(SESSIONS.delete().where(SESSIONS.c.digest == hashed))

    def _touch(self, hashed: str, used: str | None) -> None:
        at = dt.datetime.now(dt.UTC)
        if used and (at - dt.datetime.fromisoformat(used)).total_seconds() < TOUCH_S:
            return
        with self._engine.begin() as con:
            con.execute(TOKENS.update().where(TOKENS.c.digest == hashed)
                        .values(last_used_at=at.isoformat(timespec="seconds")))


def _migrate(engine: sa.Engine) -> None:
    """Bring a database made by an older service up to these tables: add the columns it lacks,
    and remove the session key it kept (sessions are now server-side)."""
    inspector = sa.inspect(engine)
    have = {c["name"] for c in inspector.get_columns(TOKENS.name)}
    with engine.begin() as con:
        for column in _ADDED_COLUMNS:
            if column not in have:
                con.execute(sa.text(f"ALTER TABLE {TOKENS.name} ADD COLUMN {column} "
                                    "VARCHAR(32)"))
        if inspector.has_table(_OLD_SECRETS):
            con.execute(sa.text(f"DELETE FROM {_OLD_SECRETS} WHERE name = 'session'"))
