#!/usr/bin/python3
"""A stalled peer must not hang attn-check: rank 1 is stopped with SIGSTOP while the check runs;
every live rank must report it (naming rank 1 and its own phase) and the job must end, well
before the outer timeout. Prints "watchdog: PASS" on success.

The stop comes once every rank's watchdog thread runs (named hexiseq-watch in /proc); the plan is
large enough that the check is still running then (about 40 s on the 2-core development machine).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time


def rank_pid(parent, rank):
    """The pid of the MPI process of `rank` among the descendants of `parent`."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == parent and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(name)
    return None


def watchdog_running(pid):
    """True when the process has its watchdog thread (named hexiseq-watch)."""
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                if f.read().strip() == "hexiseq-watch":
                    return True
    except OSError:
        pass
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        subprocess.run([args.bin, "plan", "--cluster", args.cluster, "--model", args.model,
                        "--seq", "4K", "--strategy", "ring", "--format", "json", "-o", plan],
                       check=True, capture_output=True)
        job = subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                                args.bin, "attn-check", "--plan", plan, "--timeout", "4"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Stop rank 1 once every rank's watchdog thread runs (MPI is up everywhere then).
        stopped, deadline = None, time.time() + 120
        while time.time() < deadline and job.poll() is None:
            pids = [rank_pid(job.pid, rank) for rank in range(4)]
            if all(pid and watchdog_running(pid) for pid in pids):
                stopped = pids[1]
                break
            time.sleep(0.2)
        if stopped is None:
            job.kill()
            print("FAIL: the watchdog threads did not all start (or the job ended):\n" +
                  job.communicate()[1])
            return 1
        os.kill(stopped, signal.SIGSTOP)
        start = time.time()
        try:
            out, err = job.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.kill(stopped, signal.SIGKILL)
            job.kill()
            out, err = job.communicate()
            print("FAIL: the job still hung 90 s after rank 1 was stopped\n" + err)
            return 1
        finally:
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        seconds = time.time() - start
    print(err)
    reports = [line for line in err.splitlines() if "no heartbeat from rank 1" in line]
    live = {rank for rank in (0, 2, 3) if any(f"rank {rank} (phase " in l for l in reports)}
    ok = job.returncode != 0 and "PASS" not in out and len(live) >= 1
    print(f"exit {job.returncode} {seconds:.1f} s after the stop; live ranks that reported: "
          f"{sorted(live)}")
    print("watchdog: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
