"""Who is asking, and may they.

API clients send ``Authorization: Bearer <token>``. A browser signs in with a token once and
gets a session cookie (HttpOnly, SameSite=Strict, signed with the database's session key, valid
for 12 hours); every form it posts carries a CSRF token derived from that session, checked on
the way in. With no token configured, a service bound to loopback serves its one local user
(an admin); the service refuses to listen beyond loopback without tokens (`tuner.app.serve`).

Any signed-in user may read; only a study's owner or an admin may cancel, delete or resume it.

Resolving a request costs no database read on the hot path: whether tokens are configured, and
the user of each token seen, are read at most every `CACHE_S` (a token created meanwhile by
`moetune token create`, another process, counts within that time); a session cookie is checked
by its HMAC alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable

from fastapi import HTTPException, Request

from tuner.app.service.tokens import TokenStore, User, digest

COOKIE = "moetune_session"
SESSION_S = 12 * 3600
LOCAL = User(name="local", admin=True)
CACHE_S = 2.0  # how long a database answer about tokens is trusted


class Auth:
    """Resolves a request to a `User` (or 401) and signs sessions and CSRF tokens."""

    def __init__(self, tokens: TokenStore, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._tokens = tokens
        self._key = tokens.session_key()
        self._clock = clock
        self._any: tuple[float, bool] | None = None  # (read at, whether any token exists)
        # a verified token's digest -> (read at, its user); unknown tokens are not kept, so
        # this holds at most one entry per real token. Looked up by SHA-256 digest: how long
        # the lookup takes says nothing usable about a token.
        self._users: dict[str, tuple[float, User]] = {}

    def required(self) -> bool:
        """Whether tokens are configured (then every request must carry one)."""
        required = self._required(read=True)
        assert required is not None
        return required

    def user(self, request: Request) -> User:
        """The request's user; 401 when tokens are configured and none valid was given. Reads
        the database for what it has not read within `CACHE_S`."""
        user = self._resolve(request, read=True)
        assert user is not None
        return user

    async def user_async(self, request: Request) -> User:
        """`user` without blocking the event loop: answered from what was read within
        `CACHE_S`, else by a database read in a worker thread."""
        user = self._resolve(request, read=False)
        return user if user is not None else await asyncio.to_thread(self.user, request)

    def _required(self, *, read: bool) -> bool | None:
        hit = self._any
        if hit is None or self._clock() - hit[0] >= CACHE_S:
            if not read:
                return None
            hit = self._any = (self._clock(), self._tokens.any())
        return hit[1]

    def _resolve(self, request: Request, *, read: bool) -> User | None:
        """The request's user, or 401; None when that takes a database read and ``read`` is
        False."""
        required = self._required(read=read)
        if required is None:
            return None
        if not required:
            return LOCAL
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            hashed = digest(header[7:].strip())
            hit = self._users.get(hashed)
            if hit is None or self._clock() - hit[0] >= CACHE_S:
                if not read:
                    return None
                user = self._tokens.user_by_digest(hashed)
                if user is None:
                    self._users.pop(hashed, None)
                    raise HTTPException(401, "Authorization: unknown token.")
                hit = self._users[hashed] = (self._clock(), user)
            return hit[1]
        user = self.session_user(request.cookies.get(COOKIE, ""))
        if user is not None:
            return user
        raise HTTPException(401, "Authorization: sign in, or send 'Authorization: Bearer "
                                 "<token>' (tokens come from `moetune token create`).",
                            headers={"WWW-Authenticate": "Bearer"})

    def sign_in(self, token: str) -> str | None:
        """A session cookie value for a valid token, else None."""
        user = self._tokens.user(token)
        if user is None:
            return None
        body = f"{user.name}|{int(user.admin)}|{int(time.time()) + SESSION_S}"
        return f"{body}|{self._sign(body)}"

    def session_user(self, cookie: str) -> User | None:
        name, admin, expiry, sig = (cookie.split("|") + ["", "", "", ""])[:4]
        body = f"{name}|{admin}|{expiry}"
        if not (sig and hmac.compare_digest(sig, self._sign(body)) and expiry.isdigit()
                and int(expiry) > time.time()):
            return None
        return User(name=name, admin=admin == "1")

    def csrf_token(self, request: Request) -> str:
        """The token a form of this session must carry ('' without a session)."""
        cookie = request.cookies.get(COOKIE, "")
        return self._sign(f"csrf|{cookie}") if cookie else ""

    def check_csrf(self, request: Request, sent: str) -> None:
        """403 unless a form from a signed-in session carries its CSRF token."""
        if not self.required():
            return  # loopback, one local user, no sessions
        want = self.csrf_token(request)
        if not (want and sent and hmac.compare_digest(want, sent)):
            raise HTTPException(403, "csrf: the form's CSRF token is missing or wrong; reload "
                                     "the page and try again.")

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


def may_change(user: User, owner: str) -> bool:
    """Cancel, delete and resume: the owner or an admin."""
    return user.admin or user.name == owner
