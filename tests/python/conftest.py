"""Shared helpers for the Python tests: paths, the CLI, and launching multi-process runs."""

import json
import os
import socket
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get(
    "HEXISEQ_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
HEXISEQ_BIN = os.environ.get("HEXISEQ_BIN", os.path.join(SOURCE_DIR, "build", "bin", "hexiseq"))
PYTHON = sys.executable


def source_path(*parts):
    return os.path.join(SOURCE_DIR, *parts)


def run_cli(*args):
    """Runs the hexiseq command; returns (exit code, stdout, stderr)."""
    done = subprocess.run([HEXISEQ_BIN, *args], capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout, done.stderr


def cli_json(*args):
    code, out, err = run_cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, world, args, timeout):
    """Starts `world` processes of `script` (rank and world on the command line, gloo over TCP)
    and waits for all of them; a run that passes `timeout` seconds is killed and fails the test.
    Returns [(exit code, output)] by rank."""
    init = f"tcp://127.0.0.1:{free_port()}"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([PYTHON, script, "--init", init, "--rank", str(rank), "--world",
                          str(world), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
        for rank in range(world)
    ]
    results = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            results.append((proc.returncode, out))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"{script} with {world} processes did not finish in {timeout} s (hang)")
    return results
