#!/usr/bin/python3
"""The scale harness (docs/performance.md, "Scale simulation"): one or two real
compute-frontends in kube mode against a simulated cluster (bench/scale/cluster.py: the test
API server and N simulated nodes, pods made as objects with status, no runsc) and fake node
agents (bench/scale/agents.py: bounded latencies, no sandboxes). Drives a ramp of creates at
a fixed rate with a steady mix of describe/exec/file calls, destroys, an API-server restart,
a forced 410 relist, a GC pass over PVCs past their delete-after and a rolling restart of
the agents; prints the figures and the goals next to them, and writes them as JSON.

Run by scripts/scale (not by the test suite): ./scripts/scale [--sandboxes N] ..."""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

import grpc  # noqa: E402

SANDBOX_NS = "compute-sandboxes"
AGENT_NS = "compute-system"
MiB = 1024 * 1024


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def proc_mem(pid):
    """(VmRSS, VmHWM) in bytes."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


class Child:
    """A helper process speaking JSON lines on stdin/stdout."""

    def __init__(self, argv, log):
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1)
        self.first = json.loads(self.proc.stdout.readline() or "null")
        self.lock = threading.Lock()
        if self.first is None:
            raise RuntimeError("%s did not start (see %s)" % (argv[1], log))

    def ask(self, line):
        with self.lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def cmd(self, **kw):
        return self.ask(json.dumps(kw))

    def close(self):
        try:
            self.proc.stdin.write(("quit" if "agents" in self.proc.args[1] else
                                   json.dumps({"cmd": "quit"})) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Frontend:
    def __init__(self, build_dir, workdir, kubeconfig, extra=()):
        from compute_client import Compute
        self.port = free_port()
        self.address = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(workdir, "frontend-%d.log" % self.port)
        self.argv = [os.path.join(build_dir, "bin", "compute-frontend"), "--listen", self.address,
                     "--shutdown-grace-ms", "3000", "--scheduler", "kube", "--kubeconfig",
                     kubeconfig, "--spawner-image", "agent", "--sandbox-namespace", SANDBOX_NS,
                     "--agent-namespace", AGENT_NS, "--sandbox-image", "debian:bookworm-compute",
                     "--log-level", "info"] + list(extra)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        self.clients = [Compute(build_dir, self.address) for _ in range(4)]
        deadline = time.monotonic() + 60
        while True:
            try:
                self.clients[0].describe("x")
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("frontend did not start; see " + self.log_path)
            time.sleep(0.1)

    def client(self):
        return random.choice(self.clients)

    def mem(self):
        return proc_mem(self.proc.pid)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        for c in self.clients:
            c.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Harness:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="cs-scale-", dir="/tmp")
        self.phase = "start"
        self.lock = threading.Lock()
        self.live = []            # (id, created monotonic time, frontend index)
        self.errors = collections.Counter()   # (phase, op, code)
        self.ops = collections.Counter()      # (phase, op)
        self.lat = collections.defaultdict(list)  # op -> seconds (steady mix)
        self.create_s, self.destroy_s = [], []
        self.visible = {}         # sandbox id -> time.time() READY was first seen
        self.mem_samples = []     # (time, phase, rss of each frontend)
        self.stop_mix = threading.Event()
        self.mix_on = threading.Event()
        self.figures = {}
        py = "/usr/bin/python3"
        self.agents = Child([py, os.path.join(HERE, "agents.py"), args.build_dir,
                             str(args.nodes)], os.path.join(self.dir, "agents.log"))
        self.cluster = Child([py, os.path.join(HERE, "cluster.py"), os.path.join(self.dir, "api"),
                              str(args.nodes), json.dumps(self.agents.first["ports"])],
                             os.path.join(self.dir, "cluster.log"))
        self.kubeconfig = self.cluster.first["kubeconfig"]
        self.frontends = [Frontend(args.build_dir, self.dir, self.kubeconfig)
                          for _ in range(args.frontends)]

    # ---- recording ----
    def ok(self, op):
        with self.lock:
            self.ops[(self.phase, op)] += 1

    def fail(self, op, e):
        code = e.code().name if isinstance(e, grpc.RpcError) else type(e).__name__
        with self.lock:
            self.ops[(self.phase, op)] += 1
            self.errors[(self.phase, op, code)] += 1
            n = sum(self.errors.values())
        if n <= 20:
            detail = e.details() if isinstance(e, grpc.RpcError) else str(e)
            print("  error in %s: %s %s: %s" % (self.phase, op, code, detail), flush=True)

    def sampler(self):
        while not self.stop_mix.is_set():
            try:
                self.mem_samples.append((time.time(), self.phase,
                                         [f.mem()[0] for f in self.frontends]))
            except OSError:
                pass
            time.sleep(0.05)

    # ---- operations ----
    def create(self, i, sample_lag):
        fi = i % len(self.frontends)
        c = self.frontends[fi].client()
        t0 = time.monotonic()
        try:
            r = c.create("tenant-%d" % (i % 97), "session-%d" % i)
        except Exception as e:
            self.fail("create", e)
            return
        dt = time.monotonic() - t0
        with self.lock:
            self.create_s.append(dt)
            self.live.append((r.sandbox_id, time.monotonic(), fi))
            self.live_ids.add(r.sandbox_id)
        self.ok("create")
        if sample_lag:
            self.poll_ready(c, r.sandbox_id)

    def poll_ready(self, c, sid):
        """Describes the sandbox every poll interval until READY: when the frontend's cache
        saw the pod's Running status (within the interval plus one describe)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                d = c.describe(sid)
                if d.status == c.pb.SANDBOX_STATUS_READY:
                    with self.lock:
                        self.visible[sid] = time.time()
                    return
            except grpc.RpcError as e:
                self.fail("describe(lag)", e)
                return
            time.sleep(self.args.poll_ms / 1000.0)

    def pick(self):
        with self.lock:
            ready = [x for x in self.live[-5000:] if time.monotonic() - x[1] > 2.0]
        return random.choice(ready) if ready else None

    def mix_op(self):
        x = self.pick()
        if x is None:
            return
        sid, _, fi = x
        c = self.frontends[random.randrange(len(self.frontends))].client()
        op = random.choices(("describe", "exec", "write", "read", "list"),
                            (40, 30, 10, 10, 10))[0]
        t0 = time.monotonic()
        try:
            if op == "describe":
                c.describe(sid)
            elif op == "exec":
                _, _, done, _ = c.exec(sid, "true", rpc_timeout=30)
                if done is None or done.exit_code != 0:
                    raise RuntimeError("exec did not complete with 0: %r" % done)
            elif op == "write":
                c.WriteFile(c.pb.WriteFileRequest(sandbox_id=sid, path="hello.txt",
                                                  data=b"hello\n"), timeout=30)
            elif op == "read":
                c.read(sid, "hello.txt")
            else:
                c.ListFiles(c.pb.ListFilesRequest(sandbox_id=sid, path="."), timeout=30)
        except Exception as e:
            if not (isinstance(e, grpc.RpcError) and self.destroyed(sid)):
                self.fail(op, e)
            return
        with self.lock:
            self.lat[op].append(time.monotonic() - t0)
        self.ok(op)

    def destroyed(self, sid):
        with self.lock:
            return sid not in self.live_ids

    def mix(self, pool):
        """The steady mix: mix_rate calls a second while mix_on is set."""
        period = 1.0 / self.args.mix_rate
        nxt = time.monotonic()
        while not self.stop_mix.is_set():
            if self.mix_on.is_set():
                pool.submit(self.mix_op)
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))

    def paced(self, pool, n, rate, fn):
        """Submits fn(i) for i in range(n) at rate a second; waits for them all."""
        futs, t0 = [], time.monotonic()
        for i in range(n):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futs.append(pool.submit(fn, i))
        for f in futs:
            f.result()

    def fe_mem(self):
        return [f.mem() for f in self.frontends]

    # ---- the run ----
    def run(self):
        a = self.args
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=48)
        mixpool = concurrent.futures.ThreadPoolExecutor(max_workers=16)
        threading.Thread(target=self.sampler, daemon=True).start()
        threading.Thread(target=self.mix, args=(mixpool,), daemon=True).start()
        self.live_ids = set()
        F = self.figures
        F["params"] = vars(a).copy()
        F["frontend_idle"] = [{"rss": m[0], "hwm": m[1]} for m in self.fe_mem()]

        # 1. creates alone: API requests per create
        window = min(500, max(1, a.sandboxes // 10))
        self.phase = "ramp"
        print("ramp: %d sandboxes over %d nodes at %g/s, %d frontend(s)"
              % (a.sandboxes, a.nodes, a.rate, a.frontends), flush=True)
        self.cluster.cmd(cmd="mark", name="window")
        t_ramp = time.monotonic()
        self.paced(pool, window, a.rate, lambda i: self.create(i, False))
        reqs = self.cluster.cmd(cmd="since", name="window")["requests"]
        by = collections.Counter("%s %s" % (r[0], r[1]) for r in reqs if r[2] != "watch")
        F["requests_per_create"] = sum(by.values()) / window
        F["requests_per_create_by"] = {k: v / window for k, v in sorted(by.items())}
        print("  %d creates alone: %.2f API requests per create %s" % (
            window, F["requests_per_create"], dict(F["requests_per_create_by"])), flush=True)

        # 2. the rest of the ramp, with the steady mix and lag samples
        self.cluster.cmd(cmd="mark", name="ramp")
        self.mix_on.set()
        rest = a.sandboxes - window

        def create_rest(i):
            self.create(window + i, (i % a.lag_every) == 0)
        self.paced(pool, rest, a.rate, create_rest)
        ramp_s = time.monotonic() - t_ramp
        reqs = self.cluster.cmd(cmd="since", name="ramp")["requests"]
        posts = [r[4] for r in reqs if r[0] == "POST" and r[1] == "pods"]
        F["ramp_s"] = ramp_s
        F["create_p50"], F["create_p99"] = pct(self.create_s, 50), pct(self.create_s, 99)
        F["post_pod_p50"], F["post_pod_p99"] = pct(posts, 50), pct(posts, 99)
        span = (reqs[-1][5] - reqs[0][5]) if len(reqs) > 1 else 1
        F["api_rps_ramp"] = sum(1 for r in reqs if r[2] != "watch") / max(span, 1e-9)
        F["api_rps_ramp_by"] = dict(collections.Counter(
            "%s %s %s" % (r[0], r[1], r[2]) for r in reqs if r[2] != "watch"))
        written = self.cluster.cmd(cmd="written", ids=list(self.visible))["written"]
        lags = [max(0.0, self.visible[i] - w) for i, w in written.items() if w]
        F["watch_lag_p50"], F["watch_lag_p99"] = pct(lags, 50), pct(lags, 99)
        F["watch_lag_n"] = len(lags)
        time.sleep(3)
        st = self.cluster.cmd(cmd="stats")
        F["after_ramp"] = {"live": len(self.live), "pods": st["pods"], "pvcs": st["pvcs"],
                           "frontends": [{"rss": m[0], "hwm": m[1]} for m in self.fe_mem()]}
        print("  ramp done in %.0f s: %d live; create p50 %.1f ms p99 %.1f ms; API POST pod "
              "p50 %.1f ms p99 %.1f ms; watch lag p50 %.0f ms p99 %.0f ms (n=%d)" % (
                  ramp_s, len(self.live), 1e3 * F["create_p50"], 1e3 * F["create_p99"],
                  1e3 * F["post_pod_p50"], 1e3 * F["post_pod_p99"], 1e3 * F["watch_lag_p50"],
                  1e3 * F["watch_lag_p99"], len(lags)), flush=True)
        for m in F["after_ramp"]["frontends"]:
            print("  frontend RSS %.1f MiB (peak %.1f MiB)" % (m["rss"] / MiB, m["hwm"] / MiB),
                  flush=True)

        # 3. destroys (a tenth), with the mix
        self.phase = "destroy"
        with self.lock:
            victims = random.sample(self.live, len(self.live) // 10)
            vs = set(v[0] for v in victims)
            self.live = [x for x in self.live if x[0] not in vs]
            self.live_ids -= vs

        def destroy(i):
            sid, _, fi = victims[i]
            t0 = time.monotonic()
            try:
                self.frontends[fi].client().destroy(sid)
            except Exception as e:
                self.fail("destroy", e)
                return
            with self.lock:
                self.destroy_s.append(time.monotonic() - t0)
            self.ok("destroy")
        # the first tenth alone (the mix paused): API requests per destroy
        alone = max(1, len(victims) // 10)
        self.mix_on.clear()
        time.sleep(1)
        self.cluster.cmd(cmd="mark", name="destroys")
        self.paced(pool, alone, a.rate, destroy)
        reqs = self.cluster.cmd(cmd="since", name="destroys")["requests"]
        by = collections.Counter("%s %s" % (r[0], r[1]) for r in reqs if r[2] != "watch")
        F["requests_per_destroy"] = sum(by.values()) / alone
        F["requests_per_destroy_by"] = {k: v / alone for k, v in sorted(by.items())}
        self.mix_on.set()
        self.paced(pool, len(victims) - alone, a.rate, lambda i: destroy(alone + i))
        F["destroy_p50"], F["destroy_p99"] = pct(self.destroy_s, 50), pct(self.destroy_s, 99)
        print("  %d destroys: p50 %.1f ms p99 %.1f ms; %.2f API requests per destroy %s" % (
            len(victims), 1e3 * F["destroy_p50"], 1e3 * F["destroy_p99"],
            F["requests_per_destroy"], F["requests_per_destroy_by"]), flush=True)

        # 4. API-server restart (down 2 s), creates and the mix going on
        self.phase = "apiserver-restart"
        base = len(self.live) + len(victims)
        stop_creates = threading.Event()

        def trickle():
            i = 0
            while not stop_creates.is_set():
                pool.submit(self.create, 10 ** 6 + base + i, False)
                i += 1
                time.sleep(1.0 / 5)
        tr = threading.Thread(target=trickle)
        tr.start()
        time.sleep(2)
        t0 = time.monotonic()
        self.cluster.cmd(cmd="restart", down=2.0)
        time.sleep(10)
        print("  API-server restart (down 2 s): %d errors" % self.phase_errors(), flush=True)

        # 5. forced 410 relist: the frontends' watches resume from a compacted version
        self.phase = "relist"
        self.cluster.cmd(cmd="mark", name="relist")
        before = max(max(s[2]) for s in self.mem_samples[-20:])
        t_exp = time.time()
        self.cluster.cmd(cmd="expire")
        time.sleep(max(10.0, a.sandboxes / 500.0))
        stop_creates.set()
        tr.join()
        reqs = self.cluster.cmd(cmd="since", name="relist")["requests"]
        lists = [r for r in reqs if r[2] == "list" and r[6]]  # the informers' pages
        F["relist_requests"] = len(lists)
        F["relist_s"] = (max(r[5] for r in lists) - t_exp) if lists else float("nan")
        F["relist_api_s"] = sum(r[4] for r in lists)
        peak = max(max(s[2]) for s in self.mem_samples if s[0] >= t_exp)
        F["relist_rss_before"], F["relist_rss_peak"] = before, peak
        F["relist_hwm"] = [m[1] for m in self.fe_mem()]
        F["relists_logged"] = sum(f.log().count("(410 Gone); listing again")
                                  for f in self.frontends)
        print("  forced 410 relist: %d caches relisted (frontend logs), %d LIST pages, last "
              "done %.2f s after the expiry (API time %.2f s); RSS %.1f -> peak %.1f MiB; %d "
              "errors" % (F["relists_logged"], len(lists), F["relist_s"], F["relist_api_s"],
                          before / MiB, peak / MiB, self.phase_errors()), flush=True)

        # 6. GC pass over PVCs past their delete-after
        self.phase = "gc"
        n0 = self.cluster.cmd(cmd="count_pvcs")["pvcs"]
        self.cluster.cmd(cmd="gc_pvcs", n=a.gc_pvcs)
        n1 = self.cluster.cmd(cmd="count_pvcs")["pvcs"]
        gc_log = os.path.join(self.dir, "gc.log")
        t0 = time.monotonic()
        with open(gc_log, "ab") as log:
            rc = subprocess.call([os.path.join(a.build_dir, "bin", "compute-frontend"),
                                  "--mode", "gc", "--scheduler", "kube", "--kubeconfig",
                                  self.kubeconfig, "--sandbox-namespace", SANDBOX_NS,
                                  "--agent-namespace", AGENT_NS], stdout=log,
                                 stderr=subprocess.STDOUT)
        F["gc_s"] = time.monotonic() - t0
        # the largest child reaped so far: the GC (the helpers and frontends still run)
        F["gc_maxrss"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        n2 = self.cluster.cmd(cmd="count_pvcs")["pvcs"]
        F["gc"] = {"rc": rc, "pvcs_before": n1, "deleted": n1 - n2, "expected": n1 - n0}
        if rc != 0 or n1 - n2 != a.gc_pvcs:
            with self.lock:
                self.errors[("gc", "gc", "rc=%d deleted=%d" % (rc, n1 - n2))] += 1
        print("  GC pass over %d PVCs past delete-after (of %d): %.1f s, deleted %d, exit %d, "
              "peak RSS %.1f MiB" % (a.gc_pvcs, n1, F["gc_s"], n1 - n2, rc,
                                     F["gc_maxrss"] / MiB), flush=True)

        # 7. rolling restart of the agents, the mix going on
        self.phase = "agent-roll"
        t0 = time.monotonic()
        for i in range(a.nodes):
            self.cluster.cmd(cmd="agent", node=i, up=False)
            self.agents.ask("restart %d %g" % (i, a.roll_down))
            self.cluster.cmd(cmd="agent", node=i, up=True)
        F["roll_s"] = time.monotonic() - t0
        print("  rolling agent restart (%d nodes, each down %.1f s): %.0f s, %d errors" % (
            a.nodes, a.roll_down, F["roll_s"], self.phase_errors()), flush=True)

        self.mix_on.clear()
        time.sleep(1)
        self.phase = "end"
        F["after_all"] = [{"rss": m[0], "hwm": m[1]} for m in self.fe_mem()]
        F["ops"] = {"%s %s" % k: v for k, v in sorted(self.ops.items())}
        F["errors"] = {"%s %s %s" % k: v for k, v in sorted(self.errors.items())}
        F["mix_p50_ms"] = {k: 1e3 * pct(v, 50) for k, v in self.lat.items()}
        F["mix_p99_ms"] = {k: 1e3 * pct(v, 99) for k, v in self.lat.items()}
        self.stop_mix.set()
        pool.shutdown(wait=True)
        mixpool.shutdown(wait=True)

    def phase_errors(self, phase=None):
        phase = phase or self.phase
        with self.lock:
            return sum(v for k, v in self.errors.items() if k[0] == phase)

    def report(self):
        F, a = self.figures, self.args
        n = F["after_ramp"]["live"]
        print("\nScale simulation: %d sandboxes on %d nodes, %d frontend(s)" % (
            n, a.nodes, a.frontends))
        rows = []
        for i, m in enumerate(F["after_ramp"]["frontends"]):
            idle = F["frontend_idle"][i]["rss"]
            per_k = (m["rss"] - idle) / MiB / (n / 1000.0) if n else float("nan")
            goal = 64 + 10 * n / 1000.0
            rows.append(("frontend %d RSS" % i, "%.1f MiB (idle %.1f, %.2f MiB per 1,000; peak "
                         "%.1f)" % (m["rss"] / MiB, idle / MiB, per_k, m["hwm"] / MiB),
                         "<= %.0f MiB" % goal, m["rss"] / MiB <= goal))
        rows.append(("create p50 / p99", "%.1f / %.1f ms" % (1e3 * F["create_p50"],
                                                           1e3 * F["create_p99"]),
                     "p99 <= 2x POST", F["create_p99"] <= 2 * F["post_pod_p99"]))
        rows.append(("API server POST pod p50 / p99", "%.1f / %.1f ms" % (
            1e3 * F["post_pod_p50"], 1e3 * F["post_pod_p99"]), "", None))
        rows.append(("watch lag p50 / p99", "%.0f / %.0f ms (n=%d, poll %d ms)" % (
            1e3 * F["watch_lag_p50"], 1e3 * F["watch_lag_p99"], F["watch_lag_n"], a.poll_ms),
            "p99 <= 1 s", F["watch_lag_p99"] <= 1.0))
        rows.append(("API requests per create", "%.2f %s" % (
            F["requests_per_create"], F["requests_per_create_by"]), "<= 3",
            F["requests_per_create"] <= 3))
        rows.append(("API requests/s during ramp", "%.0f" % F["api_rps_ramp"], "", None))
        rows.append(("relist (forced 410)", "%.2f s, %d caches, %d LIST pages; RSS %.1f -> "
                     "peak %.1f MiB" % (F["relist_s"], F["relists_logged"], F["relist_requests"],
                                        F["relist_rss_before"] / MiB,
                        F["relist_rss_peak"] / MiB), "", None))
        rows.append(("GC pass", "%.1f s for %d PVCs (deleted %d), peak RSS %.1f MiB" % (
            F["gc_s"], a.gc_pvcs, F["gc"]["deleted"], F["gc_maxrss"] / MiB), "", None))
        rows.append(("agent rolling restart", "%.0f s" % F["roll_s"], "", None))
        er = sum(v for k, v in self.errors.items() if k[0] in ("apiserver-restart", "relist"))
        rows.append(("errors through API restart + relist", str(er), "0", er == 0))
        allerr = sum(self.errors.values())
        rows.append(("errors, whole run", "%d %s" % (allerr, F["errors"] or ""), "0",
                     allerr == 0))
        for name, val, goal, met in rows:
            mark = "" if met is None else ("met" if met else "NOT met")
            print("  %-38s %s%s" % (name, val, ("   [goal %s: %s]" % (goal, mark)) if goal else ""))
        print("  mix p50 ms %s" % {k: round(v, 1) for k, v in F["mix_p50_ms"].items()})
        print("  mix p99 ms %s" % {k: round(v, 1) for k, v in F["mix_p99_ms"].items()})
        print("  operations %s" % F["ops"])
        if a.out:
            with open(a.out, "w") as f:
                json.dump(F, f, indent=1, sort_keys=True)

    def close(self):
        rcs = [f.stop() for f in self.frontends]
        self.cluster.close()
        self.agents.close()
        clean = all(rc == 0 for rc in rcs)
        if clean and not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print("logs kept in %s (frontend exit codes %s)" % (self.dir, rcs))
        return clean


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--sandboxes", type=int, default=10000, help="live sandboxes to ramp to")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rate", type=float, default=50.0, help="creates (and destroys) a second")
    ap.add_argument("--frontends", type=int, default=1, choices=(1, 2))
    ap.add_argument("--mix-rate", type=float, default=20.0,
                    help="describe/exec/file calls a second during the run")
    ap.add_argument("--lag-every", type=int, default=20,
                    help="every Nth create is polled until READY for the watch lag")
    ap.add_argument("--poll-ms", type=int, default=20, help="that poll's interval")
    ap.add_argument("--gc-pvcs", type=int, default=None,
                    help="PVCs past delete-after for the GC pass (default: --sandboxes)")
    ap.add_argument("--roll-down", type=float, default=0.2,
                    help="seconds each agent is down in the rolling restart")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    a = ap.parse_args()
    a.build_dir = os.path.abspath(a.build_dir)
    if a.gc_pvcs is None:
        a.gc_pvcs = a.sandboxes
    h = Harness(a)
    clean = False
    try:
        h.run()
        h.report()
    finally:
        clean = h.close()
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
