"""A real browser for the report tests: headless Chromium driven over its DevTools pipe.

``render(html_file)`` loads the file in Chromium, lays it out at a desktop width, and returns a
full-page PNG screenshot with the box of every ``<figure>`` (its caption, and the box of the
``<svg>`` or ``<table>`` it draws). The DevTools protocol runs over ``--remote-debugging-pipe``
(file descriptors 3 and 4, one JSON message per NUL-terminated frame), so nothing listens on a
port and no client library is needed. ``ink(...)`` counts the pixels of given colours inside a
box of the screenshot: a figure "renders" when its drawing is on the screenshot in its colours.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDTH = 1400
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
# Every figure's box, caption and drawing, as the page laid them out.
_FIGURES = """JSON.stringify([...document.querySelectorAll('figure')].map(f => {
  const art = f.querySelector('svg, table');
  const box = e => { const r = e.getBoundingClientRect();
    return [r.left + scrollX, r.top + scrollY, r.width, r.height]; };
  return {caption: (f.querySelector('figcaption') || {}).textContent || '',
          kind: art ? art.tagName.toLowerCase() : null, box: art ? box(art) : box(f)};
}))"""


@dataclass(frozen=True)
class Figure:
    """One ``<figure>`` as laid out: its caption, what it draws and where (x, y, w, h)."""

    caption: str
    kind: str | None
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class Rendered:
    """A page as Chromium rendered it."""

    png: bytes
    figures: list[Figure]
    size: tuple[int, int]
    scroll_width: int  # the page's laid-out width: above the window's, a horizontal scrollbar
    text: str  # what a person reads on the page (document.body.innerText)


def chromium() -> str | None:
    """The Chromium binary, if one is installed."""
    return next((p for p in map(shutil.which, CHROMIUM) if p), None)


class _Pipe:
    """The DevTools protocol over Chromium's pipe: commands and their replies, each awaited
    for at most ``timeout`` seconds (a browser that never answers fails the test, not hangs it).
    """

    def __init__(self, send: Any, receive: Any, timeout: float) -> None:
        self._send, self._receive = send, receive
        self._timeout = timeout
        self._buffer = b""
        self._next = 0

    def _message(self, awaited: str, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select(
                [self._receive], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                raise TimeoutError(f"chromium sent no {awaited} within {self._timeout:g} s")
            chunk = os.read(self._receive, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        frame, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(frame)
        return message

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        request: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            request["sessionId"] = session
        os.write(self._send, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + self._timeout
        while True:
            message = self._message(f"reply to {method}", deadline)
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def wait_for(self, event: str, session: str) -> None:
        deadline = time.monotonic() + self._timeout
        while True:
            message = self._message(f"{event} event", deadline)
            if message.get("method") == event and message.get("sessionId") == session:
                return


def _high(*fds: int) -> tuple[int, ...]:
    """The descriptors moved above 9, so that wiring them to 3 and 4 cannot clobber them."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved


def render(html_file: Path, timeout: float = 60.0, width: int = WIDTH) -> Rendered:
    """Load ``html_file`` in headless Chromium and take a full-page screenshot.

    Raises:
        RuntimeError: No Chromium, or it failed.
        TimeoutError: Chromium left a command unanswered, or an awaited event unsent, for
            ``timeout`` seconds.
    """
    binary = chromium()
    if binary is None:
        raise RuntimeError("no Chromium installed (scripts/setup-host installs it)")
    to_browser_r, to_browser_w = _high(*os.pipe())
    from_browser_r, from_browser_w = _high(*os.pipe())
    profile = tempfile.mkdtemp(prefix="gpunode-chromium-")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
            "about:blank"]  # fmt: skip
    # Chromium reads commands on fd 3 and writes replies on fd 4 (--remote-debugging-pipe):
    # the shell wires the pipe's ends there, then becomes Chromium.
    wiring = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
    proc = subprocess.Popen(
        ["bash", "-c", wiring, binary, *args],
        pass_fds=(to_browser_r, from_browser_w),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_browser_r)
    os.close(from_browser_w)
    try:
        return _drive(_Pipe(to_browser_w, from_browser_r, timeout), html_file, width)
    finally:
        proc.kill()
        proc.wait(timeout=timeout)
        os.close(to_browser_w)
        os.close(from_browser_r)
        shutil.rmtree(profile, ignore_errors=True)


def _drive(pipe: _Pipe, html_file: Path, width: int) -> Rendered:
    target = pipe.call("Target.createTarget", url="about:blank")["targetId"]
    session = pipe.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    pipe.call("Page.enable", session)
    pipe.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=width,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    pipe.call("Page.navigate", session, url=html_file.resolve().as_uri())
    pipe.wait_for("Page.loadEventFired", session)

    def evaluate(expression: str) -> Any:
        reply = pipe.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        return reply["result"]["value"]

    height = int(evaluate("document.documentElement.scrollHeight"))
    pipe.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=width,
        height=height,
        deviceScaleFactor=1,
        mobile=False,
    )
    figures = [
        Figure(f["caption"].strip(), f["kind"], tuple(f["box"]))
        for f in json.loads(evaluate(_FIGURES))
    ]
    scroll_width = int(evaluate("document.documentElement.scrollWidth"))
    text = str(evaluate("document.body.innerText"))
    shot = pipe.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
    return Rendered(base64.b64decode(shot["data"]), figures, (width, height), scroll_width, text)


def ink(png: bytes, box: tuple[float, float, float, float], colours: set[str]) -> int:
    """How many pixels inside ``box`` are exactly one of ``colours`` (``#rrggbb``)."""
    from PIL import Image

    wanted = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in colours}
    x, y, w, h = box
    with Image.open(io.BytesIO(png)) as image:
        crop = image.convert("RGB").crop((int(x), int(y), int(x + w), int(y + h)))
        return sum(count for count, colour in crop.getcolors(1 << 24) or [] if colour in wanted)
