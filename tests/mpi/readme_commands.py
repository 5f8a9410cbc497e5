#!/usr/bin/python3
"""Runs every `build/bin/hexiseq ...` and `mpirun ...` command of the README's code blocks, in
order, in a temporary copy of the tree that uses the built binary; each must exit 0.

As the README says, a run as root adds `--allow-run-as-root` (and `--oversubscribe`) to mpirun.
With --quick, `hexiseq train` commands run 2 steps instead of their --steps (the full runs take
minutes; the `slow` test runs them as written). The copy holds what the commands read: the README,
examples/, bench/, docs/, the hand-written plans of tests/mpi/plans and a build/bin/hexiseq link to
the binary under test.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

COMMAND_START = re.compile(r"^(build/bin/hexiseq|mpirun)\s")
COPIED = ["README.md", "examples", "bench", "docs", "tests/mpi/plans"]


def readme_commands(text):
    """The commands of the fenced code blocks, with `\\` continuation lines joined."""
    commands, in_block, pending = [], False, None
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            pending = None
            continue
        if not in_block:
            continue
        stripped = line.strip()
        if pending is not None:
            pending += " " + stripped.rstrip("\\").strip()
            if not stripped.endswith("\\"):
                commands.append(pending)
                pending = None
            continue
        if COMMAND_START.match(stripped):
            command = stripped.split("  #")[0].rstrip() if "  #" in stripped else stripped
            if command.endswith("\\"):
                pending = command.rstrip("\\").strip()
            else:
                commands.append(command)
    return commands


def adapt(command, quick):
    """The command as this test runs it (root flags for mpirun; fewer train steps when quick)."""
    if command.startswith("mpirun") and os.geteuid() == 0:
        for flag in ("--oversubscribe", "--allow-run-as-root"):
            if flag not in command:
                command = command.replace("mpirun", "mpirun " + flag, 1)
    if quick and " train " in command:
        command = re.sub(r"--steps \d+", "--steps 2", command)
    return command


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="the source tree")
    parser.add_argument("--binary", required=True, help="the built hexiseq")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per command")
    args = parser.parse_args()
    with open(os.path.join(args.source, "README.md")) as f:
        commands = readme_commands(f.read())
    if not commands:
        print("no commands found in README.md")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory(prefix="hexiseq_readme_") as tree:
        for name in COPIED:
            source = os.path.join(args.source, name)
            target = os.path.join(tree, name)
            if os.path.isdir(source):
                shutil.copytree(source, target)
            elif os.path.exists(source):
                shutil.copy(source, target)
        os.makedirs(os.path.join(tree, "build", "bin"))
        os.symlink(os.path.abspath(args.binary), os.path.join(tree, "build", "bin", "hexiseq"))
        for command in commands:
            run = adapt(command, args.quick)
            start = time.time()
            try:
                result = subprocess.run(run, shell=True, cwd=tree, capture_output=True, text=True,
                                        timeout=args.timeout)
                code, err = result.returncode, result.stderr
            except subprocess.TimeoutExpired:
                code, err = "timeout", f"ran longer than {args.timeout} s"
            seconds = time.time() - start
            print(f"[{'ok' if code == 0 else 'FAIL'}] {seconds:6.1f} s  {run}")
            if code != 0:
                failures += 1
                lines = err.strip().splitlines()
                # The program's own errors first: mpirun's banner can fill the last lines.
                ours = [line for line in lines[:-8] if line.startswith("hexiseq")]
                print(f"    exit {code}; stderr (hexiseq's errors, then the last lines):")
                for line in ours + lines[-8:]:
                    print("      " + line)
    print(f"{len(commands) - failures} of {len(commands)} README commands exit 0")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
