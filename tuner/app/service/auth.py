"""Who is asking, and may they.

API clients send ``Authorization: Bearer <token>``. A browser signs in with a token once and
gets a session cookie (HttpOnly, SameSite=Strict, signed with the database's session key, valid
for 12 hours); every form it posts carries a CSRF token derived from that session, checked on
the way in. With no token configured, a service bound to loopback serves its one local user
(an admin); the service refuses to listen beyond loopback without tokens (`tuner.app.serve`).

Any signed-in user may read; only a study's owner or an admin may cancel, delete or resume it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from fastapi import HTTPException, Request

from tuner.app.service.tokens import TokenStore, User

COOKIE = "moetune_session"
SESSION_S = 12 * 3600
LOCAL = User(name="local", admin=True)


class Auth:
    """Resolves a request to a `User` (or 401) and signs sessions and CSRF tokens."""

    def __init__(self, tokens: TokenStore) -> None:
        self._tokens = tokens
        self._key = tokens.session_key()

    def required(self) -> bool:
        return self._tokens.any()

    def user(self, request: Request) -> User:
        """The request's user; 401 when tokens are configured and none valid was given."""
        if not self.required():
            return LOCAL
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            user = self._tokens.user(header[7:].strip())
            if user is not None:
                return user
            raise HTTPException(401, "Authorization: unknown token.")
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
