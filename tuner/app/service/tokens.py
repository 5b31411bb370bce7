"""Bearer tokens for the service, kept in the study database as SHA-256 hashes.

A token is 32 random bytes (URL-safe text), shown once when created (``moetune token create``)
and never stored: the database keeps its hash, so reading the database does not give access.
Each token has a user name (the owner recorded on the studies it submits) and may be an admin
(who may cancel, delete and resume anyone's studies). The session-signing key for browser
sessions lives in the same table space, created at first use.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

import sqlalchemy as sa

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_META = sa.MetaData()
TOKENS = sa.Table(
    "moetune_tokens", _META,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("user", sa.String(64), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("admin", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
)
SECRETS = sa.Table(
    "moetune_service_secrets", _META,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("value", sa.String(128), nullable=False),
)


@dataclass(frozen=True)
class User:
    """Who is asking: a token's user, or the single local user of a loopback service with no
    tokens configured."""

    name: str
    admin: bool


def digest(token: str) -> str:
    """What the database keeps of a token (and what `auth.Auth` caches verified users by)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """Tokens and the session key in the database at ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        _META.create_all(engine)

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
            con.execute(TOKENS.insert().values(
                user=user, digest=digest(token), admin=admin,
                created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds")))
        return token

    def any(self) -> bool:
        """Whether any token exists (then every request must carry one)."""
        with self._engine.connect() as con:
            return con.execute(sa.select(sa.func.count()).select_from(TOKENS)).scalar_one() > 0

    def user(self, token: str) -> User | None:
        """The user a token belongs to, or None for an unknown token."""
        return self.user_by_digest(digest(token))

    def user_by_digest(self, hashed: str) -> User | None:
        """The user of the token whose `digest` is ``hashed``, or None."""
        with self._engine.connect() as con:
            rows = con.execute(sa.select(TOKENS.c.user, TOKENS.c.admin, TOKENS.c.digest)
                               .where(TOKENS.c.digest == hashed)).all()
        for user, admin, stored in rows:
            if hmac.compare_digest(stored, hashed):
                return User(name=user, admin=bool(admin))
        return None

    def users(self) -> list[tuple[str, bool, str]]:
        """(user, admin, created_at) of every token, for ``moetune token list``."""
        with self._engine.connect() as con:
            return [(u, bool(a), c) for u, a, c in con.execute(
                sa.select(TOKENS.c.user, TOKENS.c.admin, TOKENS.c.created_at))]

    def session_key(self) -> bytes:
        """The key that signs browser sessions (random, made once per database)."""
        with self._engine.begin() as con:
            row = con.execute(sa.select(SECRETS.c.value)
                              .where(SECRETS.c.name == "session")).first()
            if row is not None:
                return bytes.fromhex(row[0])
            key = secrets.token_hex(32)
            con.execute(SECRETS.insert().values(name="session", value=key))
            return bytes.fromhex(key)
