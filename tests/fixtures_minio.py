"""A real MinIO server (built from its Go sources) for the S3 tier's tests.

Registered as a pytest plugin in tests/conftest.py so every test folder can use `minio_server`.
Each test gets its own server on a free loopback port with an empty data directory; `stop()`
and `start()` let a test make the object store unreachable and bring it back with its data.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fixtures_controlplane import require_binary

from storage_node.cli.local import free_port

STARTUP_LIMIT_SECONDS = 60.0


class MinioStartError(RuntimeError):
    """MinIO did not become ready; the message carries its log."""


@dataclass
class MinioServer:
    """A running MinIO process and what a client needs to reach it."""

    binary: Path
    data_dir: Path
    log_path: Path
    port: int
    access_key: str = "msgstore-test"
    secret_key: str = "msgstore-test-secret"
    region: str = "us-east-1"
    _process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point an AWS SDK at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def s3_client(self) -> Any:
        """A boto3 S3 client for this server (path-style addressing, as MinIO expects)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def create_bucket(self, name: str) -> str:
        # /minio/health/ready can answer before the object layer is initialised on a loaded
        # machine: wait out XMinioServerNotInitialized (30 s at most)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.s3_client().create_bucket(Bucket=name)
                break
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code != "XMinioServerNotInitialized" or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return name

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Starts MinIO and waits until its readiness endpoint answers."""
        if self.running:
            return
        env = dict(os.environ)
        env.update(
            {
                "MINIO_ROOT_USER": self.access_key,
                "MINIO_ROOT_PASSWORD": self.secret_key,
                "MINIO_REGION": self.region,
                "MINIO_BROWSER": "off",
                "MINIO_UPDATE": "off",
            }
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [
                    str(self.binary),
                    "server",
                    str(self.data_dir),
                    "--address",
                    f"127.0.0.1:{self.port}",
                    "--quiet",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_LIMIT_SECONDS
        url = f"{self.endpoint}/minio/health/ready"
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        log = self.log_path.read_text(errors="replace")[-4000:]
        raise MinioStartError(f"MinIO did not become ready on {self.endpoint}:\n{log}")

    def stop(self) -> None:
        """Stops the server; its data directory stays for a later start()."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


@pytest.fixture
def minio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A fresh MinIO server for one test; never skipped when MinIO cannot be built."""
    binary = require_binary("minio")
    root = tmp_path_factory.mktemp("minio")
    server = MinioServer(
        binary=binary, data_dir=root / "data", log_path=root / "minio.log", port=free_port()
    )
    try:
        server.start()
    except MinioStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
