"""The proxy as a separate process (``tiered-router serve``), for multi-worker and
multi-replica tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from redisfix import free_port

from tiered_router import _http

CLIENT_KEY = "client-key-0123456789"


class ProxyProcess:
    """``tiered-router serve POLICY --workers N [ARGS]`` on a free loopback port."""

    def __init__(
        self,
        policy: dict[str, Any],
        directory: Path,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        name: str = "proxy",
        args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.policy_path = directory / f"{name}-{self.port}.yaml"
        self.policy_path.write_text(yaml.safe_dump(policy), encoding="utf-8")
        self.log_path = directory / f"{name}-{self.port}.log"
        self.workers = workers
        self.args = args  # more options of `serve` (`--stand-in`)
        self.env = {**os.environ, "TIERED_ROUTER_API_KEYS": CLIENT_KEY, **(env or {})}
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyProcess:
        args = [sys.executable, "-m", "tiered_router.cli", "serve", str(self.policy_path)]
        args += ["--port", str(self.port), "--workers", str(self.workers), *self.args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                args, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        with _http.build_client() as http:
            while True:
                assert self.process.poll() is None, f"proxy exited: {self.log()}"
                assert time.monotonic() < deadline, f"proxy did not start: {self.log()}"
                try:
                    if http.get(f"{self.url}/readyz").status_code == 200:
                        break
                except _http.TransportError:
                    pass
                time.sleep(0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def chat(self, http: Any, content: str = "Say hi.", **body: Any) -> Any:
        payload = {"model": "auto", "messages": [{"role": "user", "content": content}], **body}
        return http.post(
            f"{self.url}/v1/chat/completions",
            content=json.dumps(payload).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {CLIENT_KEY}"},
        )

    def metrics(self, http: Any) -> dict[str, float]:
        """Parse /metrics into ``{'name{label="v",...}': value}`` (labels sorted by name)."""
        response = http.get(
            f"{self.url}/metrics", headers={"authorization": f"Bearer {CLIENT_KEY}"}
        )
        assert response.status_code == 200, response.text
        return parse_metrics(response.text)


def parse_metrics(text: str) -> dict[str, float]:
    """Read a scrape with prometheus_client's own parser; keys as ``name{labels sorted}``."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values
