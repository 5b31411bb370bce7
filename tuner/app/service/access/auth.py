"""Who is asking, and may they.

API clients send ``Authorization: Bearer <token>``. A browser signs in with a token once and
gets a session cookie (HttpOnly, SameSite=Strict, 12 hours): an opaque random value whose hash
the database keeps next to the token it was signed in with (`tokens.TokenStore`), so each
request's session is checked against the database (through the cache below): sign-out and
``moetune token revoke`` end it, and a user or an admin flag cannot be forged into it.

A state change a browser asks for must show it comes from our own pages: a form carries a CSRF
token (an HMAC of the session under the key in ``ROOT/csrf.key``, `private.csrf_key`), and a
JSON API call authorized by the cookie rather than a bearer token needs that token in
``X-CSRF-Token`` or an ``Origin`` (else ``Referer``) naming this service's own host. ``/signin``
refuses a post from another origin.

With no token ever created, a service bound to loopback serves its one local user (an admin):
the user who started it, who alone can read the local token `moetune serve` makes at each start
(``ROOT/local.token``, 0600 in the 0700 root: `private.local_token`); a request must carry it
(``Authorization: Bearer``, or the session cookie a sign-in with it gives), so another account
on the same machine reaching the loopback port gets a 401. A service that ever had a token
requires one for good, even after every token is revoked, and a service bound beyond loopback
never serves the local user (whatever the database says).

Any signed-in user may read; only a study's owner or an admin may cancel, delete or resume it.

Resolving a request costs no database read on the hot path: whether tokens are configured, and
the user of each token or session seen, are read at most every `CACHE_S` (a token created,
revoked, or a session closed by another process counts within that time).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import ipaddress
import re
import secrets
import time
import urllib.parse
from collections.abc import Callable

from fastapi import HTTPException, Request

from tuner.app.service.access.tokens import TokenStore, User, digest

COOKIE = "moetune_session"
CSRF_HEADER = "x-csrf-token"
SESSION_S = 12 * 3600
LOCAL = User(name="local", admin=True)
CACHE_S = 2.0  # how long a database answer about tokens and sessions is trusted
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class Auth:
    """Resolves a request to a `User` (or 401/403) and makes sessions and CSRF tokens.

    Args:
        tokens: where tokens and sessions live.
        key: the CSRF key (`private.csrf_key`).
        open_allowed: whether the local user may be served when no token was ever made (True
            only for a service bound to loopback).
        local_token: what the local user must send (`private.local_token`); None: the local
            user sends nothing (an app in one test process, where no other account reaches it).
    """

    def __init__(self, tokens: TokenStore, key: bytes, *, open_allowed: bool = True,
                 local_token: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._tokens = tokens
        self._key = key
        self._open_allowed = open_allowed
        self._local_token = local_token
        # the local user's browser session: a new random value per start, kept in memory only
        self._local_session = secrets.token_urlsafe(32)
        self._clock = clock
        self._any: tuple[float, bool] | None = None  # (read at, whether a token was made)
        # ("token" or "session", its SHA-256 digest) -> (read at, its user); unknown ones are
        # not kept, so this holds at most one entry per real token or session. Looked up by
        # digest: how long the lookup takes says nothing usable about a secret.
        self._users: dict[tuple[str, str], tuple[float, User]] = {}

    def required(self) -> bool:
        """Whether a token is needed (then every request must carry one, or a session)."""
        required = self._required(read=True)
        assert required is not None
        return required

    def user(self, request: Request) -> User:
        """The request's user; 401 when a token is needed and none valid was given, 403 for a
        cookie-authorized change from elsewhere. Reads the database for what it has not read
        within `CACHE_S`."""
        user = self._resolve(request, read=True)
        assert user is not None
        return user

    async def user_async(self, request: Request) -> User:
        """`user` without blocking the event loop: answered from what was read within
        `CACHE_S`, else by a database read in a worker thread."""
        user = self._resolve(request, read=False)
        return user if user is not None else await asyncio.to_thread(self.user, request)

    def _required(self, *, read: bool) -> bool | None:
        if not self._open_allowed:
            return True
        hit = self._any
        if hit is not None and hit[1]:
            return True  # once a token existed, always: revoking every token does not open it
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
        if request.method not in SAFE_METHODS and same_origin(request) is False:
            raise HTTPException(403, "origin: a change must come from this service's own "
                                     "pages or a client that is not a browser, but got "
                                     f"Origin {request.headers.get('origin', 'none')!r}.")
        if not required:
            if not _loopback_host(request.headers.get("host", "")):
                raise HTTPException(403, "host: a service without tokens answers only "
                                         "requests addressed to a loopback name (127.0.0.1, "
                                         "localhost, [::1]), but got Host "
                                         f"{request.headers.get('host', '')!r}.")
            return self._local(request)
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return self._lookup("token", digest(header[7:].strip()), read=read)
        cookie = request.cookies.get(COOKIE, "")
        if not cookie:
            raise HTTPException(401, "Authorization: sign in, or send 'Authorization: Bearer "
                                     "<token>' (tokens come from `moetune token create`).",
                                headers={"WWW-Authenticate": "Bearer"})
        user = self._lookup("session", digest(cookie), read=read)
        if user is not None and request.method not in SAFE_METHODS:
            self._check_cookie_change(request)
        return user

    def _local(self, request: Request) -> User:
        """The local user, for a request that shows the local token (or its session), else
        401: the loopback port is open to every account of the machine, the token file to the
        one that started the service."""
        if self._local_token is None or self._sent_local(request):
            return LOCAL
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self._local_session.encode()):
            if request.method not in SAFE_METHODS:
                self._check_cookie_change(request)
            return LOCAL
        raise HTTPException(401, "Authorization: this service without access tokens serves the "
                                 "user who started it alone: send 'Authorization: Bearer "
                                 "<token>' with the token in ROOT/local.token (written at "
                                 "start, readable by that user only), or sign in with it.",
                            headers={"WWW-Authenticate": "Bearer"})

    def _sent_local(self, request: Request) -> bool:
        """Whether the request carries the local token as its bearer token."""
        header = request.headers.get("authorization", "")
        sent = header[7:].strip() if header.lower().startswith("bearer ") else ""
        return bool(sent and self._local_token
                    and hmac.compare_digest(sent.encode(), self._local_token.encode()))

    def _lookup(self, kind: str, hashed: str, *, read: bool) -> User | None:
        hit = self._users.get((kind, hashed))
        if hit is None or self._clock() - hit[0] >= CACHE_S:
            if not read:
                return None
            user = (self._tokens.user_by_digest(hashed) if kind == "token"
                    else self._tokens.session_user(hashed))
            if user is None:
                self._users.pop((kind, hashed), None)
                raise HTTPException(401, "Authorization: unknown token." if kind == "token"
                                    else "Authorization: the session ended (signed out, "
                                         "expired or its token revoked); sign in again.")
            hit = self._users[(kind, hashed)] = (self._clock(), user)
        return hit[1]

    def _check_cookie_change(self, request: Request) -> None:
        """A change authorized by the session cookie: the JSON API needs the CSRF token in
        `CSRF_HEADER` or a same-origin ``Origin``/``Referer``; a form is checked by
        `check_csrf` (and here for its origin when the browser names one)."""
        sent = request.headers.get(CSRF_HEADER, "")
        if sent and hmac.compare_digest(sent, self.csrf_token(request)):
            return
        origin = same_origin(request)
        if origin is True or (origin is None and not request.url.path.startswith("/api/")):
            return
        raise HTTPException(403, "csrf: a change authorized by the session cookie must come "
                                 f"from this service's pages (send {CSRF_HEADER!r} or a "
                                 "same-origin Origin), but got "
                                 f"Origin {request.headers.get('origin', 'none')!r}.")

    def sign_in(self, token: str) -> str | None:
        """A new session cookie value for a valid token (the local token while the service is
        open: the local user's session), else None."""
        if (self._local_token is not None and token and self._required(read=True) is False
                and hmac.compare_digest(token.encode(), self._local_token.encode())):
            return self._local_session
        return self._tokens.open_session(token, SESSION_S)

    def sign_out(self, request: Request) -> None:
        """End the request's session (the database forgets it; the cache within `CACHE_S`)."""
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self._local_session.encode()):
            self._local_session = secrets.token_urlsafe(32)  # the local user's session ends
        elif cookie:
            self._tokens.close_session(digest(cookie))
            self._users.pop(("session", digest(cookie)), None)

    def csrf_token(self, request: Request) -> str:
        """The token a form of this session must carry ('' without a session)."""
        cookie = request.cookies.get(COOKIE, "")
        return self._sign(f"csrf|{cookie}") if cookie else ""

    def check_csrf(self, request: Request, sent: str) -> None:
        """403 unless a form from a signed-in session carries its CSRF token."""
        if not self.required() and (self._local_token is None or self._sent_local(request)):
            # loopback, one local user: no session to forge a form of, or a client sending
            # the local token itself (no browser adds that header to another site's form)
            return
        want = self.csrf_token(request)
        if not (want and sent and hmac.compare_digest(want, sent)):
            raise HTTPException(403, "csrf: the form's CSRF token is missing or wrong; reload "
                                     "the page and try again.")

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


def same_origin(request: Request) -> bool | None:
    """Whether the request's ``Origin`` (else its ``Referer``) names the host it was sent to;
    None when it names neither (a client that is not a browser)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return None
    host = request.headers.get("host", "")
    return bool(host) and urllib.parse.urlsplit(source).netloc == host


_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))"
                   r"(?::(?P<port>\d{1,5}))?")


@functools.lru_cache(maxsize=256)  # asked on every request of an open service; few hosts
def _loopback_host(host: str) -> bool:
    """Whether a Host header names this machine by a loopback name: ``localhost``, or an IP
    literal in 127.0.0.0/8 or ``[::1]``. Any other name does not, however it starts
    (``127.0.0.1.nip.io`` is a page whose own name resolves to 127.0.0.1: DNS rebinding)."""
    # parsed strictly, as RFC 9110's Host: a name or an IP literal, then at most ":port";
    # a URL parser would find 127.0.0.1 in "evil.com@127.0.0.1" or "127.0.0.1#.evil.com"
    found = _HOST.fullmatch(host)
    if found is None or (found["port"] is not None and int(found["port"]) > 65535):
        return False
    name = found["v6"] or found["name"]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def may_change(user: User, owner: str) -> bool:
    """Cancel, delete and resume: the owner or an admin."""
    return user.admin or user.name == owner
