#!/usr/bin/env python3
"""CPU of starting one sandbox warden and running commands through it.

Starts `HELPER --warden POLICY` (HELPER: an `antler` binary, which is run as `antler
sandbox-exec`, or an `antler-sandbox-helper`) the way the launcher does, with an empty
environment, waits for its Ready frame, runs CMDS `echo hi` calls through it, closes its input
and waits for it. Reports the CPU time of the whole process tree (RUSAGE_CHILDREN: both warden
stages and every bash), per warden, as the median of SAMPLES batches of RUNS wardens.

    warden_start.py HELPER [RUNS=30] [CMDS=1] [SAMPLES=3]
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def batch(exe, runs, cmds, home):
    args = [exe] if exe.endswith("antler-sandbox-helper") else [exe, "sandbox-exec"]
    policy = {
        "mode": "required", "user_data": home + "/ud", "tmp": home + "/tmp",
        "writable": [], "readable": [], "deny_read": [], "network": "allow",
        "limits": {"memory": None, "processes": 1024, "file_size": None},
        "cgroup": "warden-start-bench",
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        p = subprocess.Popen(args + ["--warden", json.dumps(policy)], env={},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = json.loads(p.stdout.readline())
        if "guarantees" not in ready:
            sys.exit(f"the warden did not start: {ready}")
        for i in range(cmds):
            req = {"op": "exec", "id": i, "program": "/bin/bash", "args": ["-c", "echo hi"],
                   "env": [], "cwd": home + "/ud", "timeout_ms": 10000, "capture_limit": 10000}
            p.stdin.write((json.dumps(req) + "\n").encode())
            p.stdin.flush()
            reply = json.loads(p.stdout.readline())
            if reply.get("stdout") != "hi\n":
                sys.exit(f"unexpected reply: {reply}")
        p.stdin.close()
        p.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu * 1000 / runs


def main():
    exe = os.path.abspath(sys.argv[1])
    given = [int(a) for a in sys.argv[2:5]]
    runs, cmds, samples = given + [30, 1, 3][len(given):]
    # Outside /tmp, so the warden can give the sandbox a private /tmp.
    base = os.path.expanduser("~/.cache")
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as home:
        os.makedirs(home + "/ud")
        os.makedirs(home + "/tmp")
        ms = sorted(batch(exe, runs, cmds, home) for _ in range(samples))
    print(f"{exe}: {statistics.median(ms):.2f} ms CPU per warden with {cmds} command(s) "
          f"({ms[0]:.2f}-{ms[-1]:.2f}, {samples} x {runs} wardens)")


if __name__ == "__main__":
    main()
