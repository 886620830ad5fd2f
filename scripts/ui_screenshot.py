"""Screenshot a page of the local Dagster UI with headless Chromium (for docs/).

Usage: .venv/bin/python scripts/ui_screenshot.py URL OUT.png [--click TEXT ...] [--wait-text TEXT]

Drives Chromium over the DevTools protocol (websocket-client, a project dependency): dismisses
the UI's first-visit dialog ("Skip"), clicks the given buttons or tabs by their text, waits for
a text to appear, then captures the page. Only loopback URLs are accepted. Needs Debian's
``chromium`` package.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import websocket

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


class Page:
    def __init__(self, socket: websocket.WebSocket) -> None:
        self.socket = socket
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def click_text(self, text: str, timeout: float = 20.0) -> bool:
        """Click the innermost visible button, link or tab whose text is ``text``."""
        script = f"""(() => {{
            const wanted = {json.dumps(text)};
            const nodes = [...document.querySelectorAll('button, a, [role=tab], [role=button]')];
            const hit = nodes.find(n => n.innerText && n.innerText.trim() === wanted && n.offsetParent !== null);
            if (hit) {{ hit.click(); return true; }}
            return false;
        }})()"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(script):
                return True
            time.sleep(0.5)
        return False

    def wait_text(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"document.body && document.body.innerText.includes({json.dumps(text)})"):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{text!r} did not appear within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--click", action="append", default=[], help="text of a button or tab to click, in order")
    parser.add_argument("--wait-text", default=None, help="text that must be on the page before the capture")
    parser.add_argument("--size", default="1500,900")
    args = parser.parse_args()
    if urlparse(args.url).hostname not in ("127.0.0.1", "localhost"):
        parser.error("only loopback URLs (127.0.0.1, localhost)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        parser.error("chromium is not installed (Debian: apt-get install chromium)")
    width, height = (int(v) for v in args.size.split(","))
    with tempfile.TemporaryDirectory(prefix="tdstream-chromium-") as profile:
        browser = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text().strip():
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium did not open its DevTools port")
                time.sleep(0.2)
            port = port_file.read_text().split()[0]
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10).read())
            target = next(t for t in targets if t["type"] == "page")
            page = Page(websocket.create_connection(target["webSocketDebuggerUrl"], timeout=60))
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            page.call("Emulation.setDeviceMetricsOverride", **metrics)
            page.call("Page.enable")
            page.call("Page.navigate", url=args.url)
            page.click_text("Skip", timeout=10)  # the first-visit community dialog
            for text in args.click:
                if not page.click_text(text):
                    raise TimeoutError(f"nothing to click with the text {text!r}")
                time.sleep(1.0)
            if args.wait_text:
                page.wait_text(args.wait_text)
            time.sleep(2.0)  # let charts and tables finish drawing
            shot = page.call("Page.captureScreenshot", format="png")
            args.out.write_bytes(base64.b64decode(shot["data"]))
            print(f"wrote {args.out}")
        finally:
            browser.terminate()
            browser.wait(timeout=20)


if __name__ == "__main__":
    main()
