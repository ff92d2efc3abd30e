"""A headless Chromium driven over the DevTools protocol (CDP), for the report tests.

Chromium (Debian's ``chromium``) is started as root with ``--headless --no-sandbox
--disable-gpu`` and every background service off, a fresh ``--user-data-dir`` and
``--remote-debugging-port=0``; the port it picked is read from
``DevToolsActivePort`` in that folder, the page's websocket from
``http://127.0.0.1:PORT/json/list`` (loopback only). ``websocket-client`` speaks the
protocol. The browser's process group (started here) is killed at the end.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-default-apps",
         "--metrics-recording-only", "--mute-audio", "--hide-scrollbars"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """``with Browser() as b: res = b.open(path)``."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s

    def __enter__(self) -> "Browser":
        import websocket

        self.profile = Path(tempfile.mkdtemp(prefix="faultlab-chromium-"))
        # its temporary folder inside the profile: chromium makes its singleton socket's
        # folder (org.chromium.Chromium.*) there, and a killed chromium leaves it behind
        (self.profile / "tmp").mkdir()
        self.proc = subprocess.Popen([chromium_path(), *FLAGS, f"--user-data-dir={self.profile / 'data'}",
                                      "--remote-debugging-port=0", "--window-size=1200,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                                     env={**os.environ, "TMPDIR": str(self.profile / "tmp")})
        port_file = self.profile / "data" / "DevToolsActivePort"
        deadline = time.time() + self.timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=self.timeout_s, suppress_origin=True)
        self.next_id, self.events = 0, []
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.ws.close()
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this object started
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
            shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params) -> dict:
        """Send one CDP command and return its result (events seen meanwhile are kept)."""
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str) -> dict:
        for ev in self.events:
            if ev["method"] == method:
                return ev
        deadline = time.time() + self.timeout_s
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg
        raise TimeoutError(method)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (returned by value)."""
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, path: Path, width: int | None = None) -> dict:
        """Load ``path`` (in a viewport ``width`` CSS px wide when given; a phone
        below 600 px: mobile, so the page's viewport meta applies) and return what
        happened: ``requests`` (every URL the page asked for), ``errors`` (console
        errors, exceptions, log errors), ``screenshot`` (full-page PNG bytes) and
        ``images`` (per ``img``: its id, class, natural size and a PNG of the pixels
        it shows on screen)."""
        self.events = []
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        if width is not None:
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=width < 600)
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_event("Page.loadEventFired")
        time.sleep(0.2)  # let late console messages arrive
        self.call("Runtime.evaluate", expression="1")  # drains pending events
        requests = [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]
        errors = [e for e in self.events if e["method"] == "Runtime.exceptionThrown"
                  or (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                  or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
        metrics = self.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1})
        js = """JSON.stringify([...document.images].map(i => { const r = i.getBoundingClientRect();
                 return {id: i.id, cls: i.className, w: i.naturalWidth, h: i.naturalHeight, complete: i.complete,
                         x: r.left + window.scrollX, y: r.top + window.scrollY, cw: r.width, ch: r.height}; }))"""
        imgs = json.loads(self.evaluate(js))
        import base64

        for im in imgs:
            if im["cw"] > 0 and im["ch"] > 0:
                r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                              clip={"x": im["x"], "y": im["y"], "width": im["cw"], "height": im["ch"], "scale": 1})
                im["png"] = base64.b64decode(r["data"])
        return {"requests": requests, "errors": errors, "screenshot": base64.b64decode(shot["data"]), "images": imgs}


def pixel_std(png: bytes) -> float:
    """The standard deviation of a PNG's grey levels (0 for a blank image)."""
    import numpy as np
    from PIL import Image

    return float(np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float).std())
