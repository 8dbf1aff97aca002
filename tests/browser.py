"""A real browser for the tests: Debian's headless Chromium, and a DevTools Protocol session over a pipe (no port,
no extra package) that reads what a page shows, shadow DOMs included (TensorBoard's dashboards are Polymer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# every text node a page shows, through its elements' shadow roots, in document order (no styles or scripts)
SHOWN_TEXT = """(() => { const out = []; const walk = n => {
  if (n.nodeType === 3) { const t = n.textContent.trim(); if (t) out.push(t); return; }
  if (n.nodeType === 1 && ['STYLE', 'SCRIPT', 'NOSCRIPT', 'TEMPLATE'].includes(n.tagName)) return;
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.childNodes) walk(c); };
  walk(document.body); return out; })()"""


def chromium() -> str:
    """Debian's chromium, installed by ``scripts/setup.sh`` (as root) before the tests run."""
    found = shutil.which("chromium")
    assert found, "chromium is not installed: run `bash scripts/setup.sh` as root, or `apt-get install chromium`"
    return found


def chromium_flags(tmp_path: Path) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chrome'}",
        "--window-size=1400,1200",
        "--enable-logging=stderr",
        "--v=0",
    ]


class DevTools:
    """Headless Chromium driven through the DevTools Protocol on its pipe (fd 3 in, fd 4 out, messages ended by
    NUL): ``open(url)``, then ``shown_text()`` until the page shows what it should."""

    def __init__(self, tmp_path: Path) -> None:
        commands_read, commands_write = os.pipe()
        replies_read, replies_write = os.pipe()

        def as_devtools_pipe() -> None:  # in the child: the protocol's fds
            os.dup2(commands_read, 3)
            os.dup2(replies_write, 4)

        self.process = subprocess.Popen(
            [chromium(), *chromium_flags(tmp_path), "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=as_devtools_pipe,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self.commands, self.replies = commands_write, replies_read
        self.sent, self.pending = 0, b""
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """One command and its reply (events in between are passed over)."""
        self.sent += 1
        message = {"id": self.sent, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.pending:
                chunk = os.read(self.replies, 1 << 16)
                assert chunk, f"chromium closed its DevTools pipe (exit code {self.process.poll()})"
                self.pending += chunk
            raw, self.pending = self.pending.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.sent:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    def open(self, url: str) -> None:
        self.send("Page.navigate", self.session, url=url)

    def shown_text(self) -> list[str]:
        result = self.send("Runtime.evaluate", self.session, expression=SHOWN_TEXT, returnByValue=True)["result"]
        return result.get("value") or []

    def wait_for_text(self, wanted: list[str], timeout: float = 90.0) -> list[str]:
        """The page's text once it shows every one of ``wanted`` (an assertion naming the missing ones if not)."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.shown_text()
            missing = [w for w in wanted if w not in shown]
            if not missing:
                return shown
            assert time.monotonic() < deadline, f"the page never showed {missing}; it showed {shown[:80]}"
            time.sleep(0.5)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        os.close(self.commands)
        os.close(self.replies)
