"""A headless Chromium (Debian's `chromium`) driven over the DevTools protocol through a pipe
(--remote-debugging-pipe: commands on its fd 3, answers and events on its fd 4, each a JSON
message ending in NUL), so no port and no websocket library. It resolves no host name at all
(--host-resolver-rules) and its background services are off: it talks to the loopback URL it is
given and to nothing else."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import threading


def find() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, profile: str, width: int = 1400, height: int = 1000) -> None:
        exe = find()
        assert exe, "Debian's chromium package is missing: scripts/setup.sh installs it"
        cmd_r, self._cmd_w = os.pipe()
        self._ev_r, ev_w = os.pipe()
        a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(ev_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r), os.close(ev_w)
        argv = [exe, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
                "--metrics-recording-only", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium's own sandbox refuses to run as root
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$@" 3<&{a} 4>&{b} {a}<&- {b}>&-', "bash", *argv],
                                     pass_fds=(a, b), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(a), os.close(b)
        self._next = 0
        self._answers: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self._ev_r, 65536):
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                obj = json.loads(msg)
                if "id" in obj:
                    with self._cond:
                        self._answers[obj["id"]] = obj
                        self._cond.notify_all()
        with self._cond:
            self._answers[-1] = {"error": {"message": "chromium closed its pipe"}}
            self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, browser: bool = False, timeout: float = 60) -> dict:
        """One command, to the page opened (browser=True: to the browser itself); its answer."""
        with self._cond:
            self._next += 1
            n = self._next
        msg = {"id": n, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        with self._cond:
            assert self._cond.wait_for(lambda: n in self._answers or -1 in self._answers, timeout), method
            got = self._answers.pop(n, None) or self._answers[-1]
        if "error" in got:
            raise RuntimeError(f"{method}: {got['error']}")
        return got["result"]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": url}, browser=True)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 browser=True)["sessionId"]

    def evaluate(self, expression: str):
        got = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def screenshot(self, path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close", browser=True, timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        self._reader.join(10)
        os.close(self._ev_r)
