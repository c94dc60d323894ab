#!/usr/bin/python3
"""The cost of workspace volumes (issue 12, docs/performance.md): two real node agents (local
mode, runsc, the default image), one with --workspace-volumes=on and one with off, used in
turn (on, off, on, off, ...) so that a drift of the machine's speed hits both alike.

Per run and agent: a cold CreateSandbox (default 10Gi workspace) until its first exec
(`true`) has completed, then one WriteFile of 16 MiB into the new workspace; then the sandbox
is destroyed. Prints min / median / max in milliseconds for each, and for the CreateSandbox
call alone (where the volume is made: image, mkfs.ext4, loop device, mount).

    /usr/bin/python3 bench/volume_cost.py BUILD_DIR [RUNS]      (root, runsc)
"""
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from agent_fixture import AgentProcess, remove_cgroup  # noqa: E402


def one_run(agent, data):
    c = agent.client
    sid = str(uuid.uuid4())
    t0 = time.monotonic()
    c.CreateSandbox(c.pb.CreateSandboxRequest(sandbox_id=sid, tenant_id="bench",
                                              session_id=str(uuid.uuid4())), timeout=60)
    tc = time.monotonic()
    _, _, done, _ = c.exec(sid, "true")
    t1 = time.monotonic()
    assert done.exit_code == 0, done
    c.WriteFile(c.pb.WriteFileRequest(ref=c.ref(sid), path="big.bin", data=data), timeout=60)
    t2 = time.monotonic()
    c.DestroySandbox(c.pb.DestroySandboxRequest(ref=c.ref(sid)), timeout=60)
    return (tc - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000


def fmt(xs):
    return f"{min(xs):7.1f} {statistics.median(xs):7.1f} {max(xs):7.1f}"


def main():
    build_dir = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    data = os.urandom(16 << 20)
    agents = {"on": AgentProcess(build_dir, "--workspace-volumes=on"),
              "off": AgentProcess(build_dir, "--workspace-volumes=off")}
    res = {k: ([], [], []) for k in agents}
    try:
        for k, a in agents.items():  # warm-up: the image's files in the page cache
            one_run(a, data)
        for _ in range(runs):
            for k, a in agents.items():
                for i, ms in enumerate(one_run(a, data)):
                    res[k][i].append(ms)
    finally:
        for a in agents.values():
            rc, tail = a.cleanup()
            remove_cgroup(a.cgroup_parent)
            if rc != 0:
                print(f"agent exited {rc}:\n{tail}", file=sys.stderr)
    print(f"{runs} runs each, alternating; ms: min median max")
    for k in agents:
        print(f"volumes {k:3}: CreateSandbox call {fmt(res[k][0])}   create -> first exec "
              f"{fmt(res[k][1])}   WriteFile 16 MiB {fmt(res[k][2])}")


if __name__ == "__main__":
    main()
