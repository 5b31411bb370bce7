"""Open a page in headless Chromium and say what a reader's browser would see.

Drives Chromium over the DevTools protocol (a minimal WebSocket client, standard library only):
collects console errors, uncaught exceptions and every network request the page makes (a
self-contained report makes none), counts the rendered Plotly figures, and can save a screenshot.

    python tests/browser.py out/s1/report.html --screenshot docs/report.png
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*")
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


@dataclass(kw_only=True)
class PageCheck:
    """What loading the page produced."""

    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    n_plots: int = 0  # Plotly figures that rendered an SVG

    @property
    def remote_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]


def find_browser() -> str | None:
    """Path of a Chromium-family browser on PATH, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def check_page(path: str | Path, *, screenshot: str | Path | None = None,
               size: tuple[int, int] = (1400, 2000), settle_s: float = 2.0,
               timeout_s: float = 60.0) -> PageCheck:
    """Load `path` in headless Chromium; optionally save a PNG screenshot of the top of the page.

    Raises:
        FileNotFoundError: no Chromium on PATH.
        TimeoutError: the page did not finish loading within `timeout_s`.
    """
    with Browser(size=size, timeout_s=timeout_s) as browser:
        return _drive(browser, Path(path).resolve(), screenshot, settle_s, timeout_s)


class Browser:
    """A headless Chromium with a fresh profile, driven over DevTools: `goto` a URL, `evaluate`
    script in the page, take a `screenshot`. Every DevTools event is kept in `events`.

        >>> with Browser() as b:                        # doctest: +SKIP
        ...     b.goto("http://127.0.0.1:8470/")
        ...     b.evaluate("document.title")

    Raises:
        FileNotFoundError: no Chromium on PATH (on entering).
    """

    def __init__(self, *, size: tuple[int, int] = (1400, 2000), timeout_s: float = 60.0) -> None:
        self._size = size
        self._timeout_s = timeout_s
        self._downloads_seen: set[str] = set()  # guids `wait_download` has answered

    def __enter__(self) -> Browser:
        exe = find_browser()
        if exe is None:
            raise FileNotFoundError(f"no browser found on PATH (looked for "
                                    f"{', '.join(BROWSERS)})")
        self._profile = Path(tempfile.mkdtemp(prefix="moetune-chromium-"))
        self._proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self._profile}",
                                       "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = _devtools_port(self._profile, self._proc, self._timeout_s)
            self.cdp = _Cdp(_page_ws_url(port))
            for domain in ("Runtime", "Log", "Network", "Page"):
                self.cdp.call(f"{domain}.enable")
            self.cdp.call("Emulation.setDeviceMetricsOverride", width=self._size[0],
                          height=self._size[1], deviceScaleFactor=1, mobile=False)
        except BaseException:
            self._close_process()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cdp.sock.close()
        self._close_process()

    @property
    def events(self) -> list[tuple[str, dict]]:
        return self.cdp.events

    def goto(self, url: str) -> None:
        """Navigate and wait until the page has loaded."""
        self.cdp.call("Page.navigate", url=url)
        _wait_loaded(self.cdp, url, self._timeout_s)

    def evaluate(self, expression: str) -> object:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        out = self.cdp.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                            returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression[:80]}: {out['exceptionDetails'].get('text')}")
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 60.0) -> object:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:  # the page is navigating: ask again
                value = None
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression[:80]} stayed false for {timeout_s} s")

    def screenshot(self, path: str | Path) -> None:
        png = self.cdp.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(png))

    def allow_downloads(self, folder: str | Path) -> None:
        """Save what the page downloads (a link or a form answered as an attachment) into
        ``folder`` under the name the server suggests, as a user's browser would."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.cdp.call("Browser.setDownloadBehavior", behavior="allow",
                      downloadPath=str(Path(folder).resolve()), eventsEnabled=True)

    def wait_download(self, timeout_s: float = 60.0) -> str:
        """The suggested file name of the next download to complete (after `allow_downloads`);
        each download is answered once.

        Raises:
            RuntimeError: the download was cancelled.
            TimeoutError: none completed within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            names: dict[str, str] = {p["guid"]: p["suggestedFilename"] for m, p in self.events
                                     if m == "Browser.downloadWillBegin"}
            for method, params in self.events:
                guid = params.get("guid")
                if (method != "Browser.downloadProgress" or guid not in names
                        or guid in self._downloads_seen
                        or params["state"] not in ("completed", "canceled")):
                    continue
                self._downloads_seen.add(guid)
                if params["state"] == "canceled":
                    raise RuntimeError(f"download {names[guid]!r} was cancelled")
                return names[guid]
            self.evaluate("0")  # DevTools events arrive along with the answers to calls
            time.sleep(0.1)
        raise TimeoutError(f"no download completed within {timeout_s} s")

    def _close_process(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        _remove_profile(self._profile)


def _remove_profile(profile: Path) -> None:
    # Chromium's helper processes may still write to the profile for a moment after the main
    # process exits; retry briefly, then leave what remains to the system's temp cleaning.
    for _ in range(50):
        shutil.rmtree(profile, ignore_errors=True)
        if not profile.exists():
            return
        time.sleep(0.1)


def _devtools_port(profile: Path, proc: subprocess.Popen, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"browser exited early with status {proc.returncode}")
        if marker.exists() and marker.read_text().strip():
            return int(marker.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError("browser did not open its DevTools port")


def _page_ws_url(port: int, timeout_s: float = 30.0) -> str:
    # The page target can show up a moment after the DevTools port does.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        if pages:
            url: str = pages[0]["webSocketDebuggerUrl"]
            return url
        time.sleep(0.1)
    raise TimeoutError("browser opened no page")


def _drive(browser: Browser, path: Path, screenshot: str | Path | None, settle_s: float,
           timeout_s: float) -> PageCheck:
    result = PageCheck()
    browser.goto(path.as_uri())
    time.sleep(settle_s)  # let Plotly finish drawing (it renders after load)
    n = browser.evaluate("[...document.querySelectorAll('.js-plotly-plot')]"
                         ".filter(d => d.querySelector('.main-svg')).length")
    result.n_plots = int(n) if isinstance(n, (int, float)) else 0
    if screenshot is not None:
        browser.screenshot(screenshot)
    for method, params in browser.events:
        _record(result, method, params)
    return result


def _wait_loaded(cdp: _Cdp, url: str, timeout_s: float) -> None:
    # A late load event of the initial about:blank must not count as our page's.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = cdp.call("Runtime.evaluate", expression="document.readyState + ' ' + "
                             "location.href")["result"].get("value", "")
        except RuntimeError:  # the old document's context went away mid-call: ask again
            state = ""
        if state == f"complete {url}":
            return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not finish loading within {timeout_s} s")


def _record(result: PageCheck, method: str, params: dict) -> None:
    if method == "Runtime.exceptionThrown":
        d = params["exceptionDetails"]
        result.errors.append(d.get("exception", {}).get("description") or d.get("text", ""))
    elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        result.errors.append(" ".join(str(a.get("value", a.get("description")))
                                      for a in params["args"]))
    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
        result.errors.append(params["entry"]["text"])
    elif method == "Network.requestWillBeSent":
        result.requests.append(params["request"]["url"])


class _Cdp:
    """Just enough WebSocket (RFC 6455, client side, unfragmented text frames) for DevTools."""

    def __init__(self, url: str) -> None:
        host_port, _, resource = url.removeprefix("ws://").partition("/")
        host, _, port = host_port.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{resource} HTTP/1.1\r\nHost: {host_port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"DevTools refused the WebSocket: {head[:200]!r}")
        self.next_id = 0
        self.events: list[tuple[str, dict]] = []

    def __enter__(self) -> _Cdp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict = msg.get("result", {})
                return result
            self.events.append((msg.get("method", ""), msg.get("params", {})))

    def _send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else
                                bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _recv(self) -> str:
        payload = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self._exact(8), "big")
            payload += self._exact(n)
            if b0 & 0x80:  # FIN: message complete
                return payload.decode()

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            buf += chunk
        return buf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args(argv)
    check = check_page(args.html, screenshot=args.screenshot)
    print(f"plots rendered: {check.n_plots}; console errors: {len(check.errors)}; "
          f"remote requests: {len(check.remote_requests)}")
    for e in check.errors + check.remote_requests:
        print("  ", e)
    return 1 if check.errors or check.remote_requests else 0


if __name__ == "__main__":
    raise SystemExit(main())
