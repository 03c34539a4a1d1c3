"""Checks made before anything starts, each failing with a message that says how to fix it."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess

from infra.launcher.errors import LaunchError

MINIMUM_JAVA = 17


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port and we could bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def require_free_port(host: str, port: int, what: str, variable: str) -> None:
    """Fail when another process already holds the port `what` needs."""
    if not port_is_free(host, port):
        raise LaunchError(
            f"port {port} on {host}, needed by {what}, is already in use by another process",
            f"stop whatever listens there (`ss -ltnp 'sport = :{port}'` shows it), "
            f"or choose another port with {variable}=... in .env",
        )


def java_major_version(java: str) -> int | None:
    """The major version `java -version` reports, or None when it cannot be read."""
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java(java_home: str | None) -> str:
    """The path of a Java 17+ executable, or a LaunchError saying how to get one."""
    java = f"{java_home}/bin/java" if java_home else shutil.which("java")
    install = (
        "install Java 17 or newer (on Debian: `apt-get install openjdk-17-jre-headless`) "
        "or point JAVA_HOME at one; or set KAFKA_BOOTSTRAP_SERVERS to use a Kafka you run"
    )
    if not java or not shutil.which(java):
        raise LaunchError("Java was not found, and the Kafka broker needs it", install)
    major = java_major_version(java)
    if major is None or major < MINIMUM_JAVA:
        raise LaunchError(
            f"{java} is Java {major or 'of an unknown version'}; the Kafka broker needs {MINIMUM_JAVA}+",
            install,
        )
    return java
