#!/usr/bin/python3
"""Self-test of the test Kubernetes API server (tests/kube/apiserver.py) and of the simulated
kubelet (tests/kube/kubelet_sim.py), through HTTPS with http.client/ssl like any client would.

    /usr/bin/python3 tests/kube/test_apiserver.py            # everything (kubelet part: root + runsc)
    /usr/bin/python3 tests/kube/test_apiserver.py ApiServerTest
    /usr/bin/python3 tests/kube/test_apiserver.py KubeletSimTest
"""

import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apiserver  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import testmain  # noqa: E402


class Client:
    """A minimal Kubernetes REST client over one keep-alive HTTPS connection."""

    def __init__(self, srv, token=None):
        self.host, self.port = srv.host, srv.port
        self.ctx = ssl.create_default_context(cafile=srv.ca_path)
        self.token = srv.token if token is None else token
        self.conn = None

    def _conn(self):
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __del__(self):
        self.close()

    def request(self, method, path, body=None, ctype="application/json", headers=None):
        hdrs = {"Accept": "application/json", "User-Agent": "test-client/1.0"}
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs["Content-Type"] = ctype
        hdrs.update(headers or {})
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=hdrs)
                r = c.getresponse()
                raw = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        try:
            obj = json.loads(raw) if raw else None
        except ValueError:
            obj = raw.decode()
        return r.status, r, obj

    def watch(self, path, timeout=30):
        """Opens a watch on its own connection; returns a Watch."""
        return Watch(self, path, timeout)


class Watch:
    """A watch stream, with the chunked framing checked by hand (http.client's readline cannot tell
    a stream that ended with the terminating chunk from one whose connection was cut)."""

    def __init__(self, client, path, timeout):
        self.conn = http.client.HTTPSConnection(client.host, client.port, context=client.ctx,
                                                timeout=timeout)
        self.conn.request("GET", path, headers={"Authorization": "Bearer " + client.token})
        self.resp = self.conn.getresponse()
        self.buf = b""
        self.ended = False

    def _chunk(self):
        fp = self.resp.fp
        line = fp.readline(1 << 16)
        if not line:
            raise http.client.IncompleteRead(self.buf)
        assert line.endswith(b"\r\n"), line
        size = int(line.split(b";")[0], 16)
        if size == 0:
            assert fp.readline(1 << 16) == b"\r\n"
            self.ended = True
            return b""
        data = fp.read(size)
        if len(data) < size:
            raise http.client.IncompleteRead(data)
        if fp.read(2) != b"\r\n":
            raise http.client.IncompleteRead(data)
        return data

    def next(self):
        """The next event as a dict, or None when the stream ended cleanly."""
        if self.resp.getheader("Transfer-Encoding") != "chunked":
            raise AssertionError("watch response not chunked: %s" % self.resp.read()[:300])
        while b"\n" not in self.buf:
            if self.ended:
                assert self.buf == b"", self.buf
                return None
            self.buf += self._chunk()
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def next_non_bookmark(self):
        while True:
            ev = self.next()
            if ev is None or ev["type"] != "BOOKMARK":
                return ev

    def close(self):
        self.conn.close()


def pod_body(name, labels=None, node=None, **spec):
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "sandbox", "image": "debian:bookworm-compute",
                                     "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 5}}
    if node:
        body["spec"]["nodeName"] = node
    body["spec"].update(spec)
    return body


def pvc_body(name, size="1Gi"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}


def assert_status(tc, obj, code, reason):
    tc.assertEqual(obj["kind"], "Status")
    tc.assertEqual(obj["apiVersion"], "v1")
    tc.assertEqual(obj["metadata"], {})
    tc.assertEqual(obj["status"], "Failure")
    tc.assertEqual(obj["code"], code)
    tc.assertEqual(obj["reason"], reason)
    tc.assertTrue(obj["message"])


class ApiServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="compute-test-apiserver-")
        cls.srv = apiserver.ApiServer(cls.tmp, token="secret-token", namespace="compute-sandboxes")
        cls.srv.start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.srv.clear_faults()
        self.srv.bookmark_interval = 5.0
        self.c = Client(self.srv)
        self.ns = "t-" + uuid.uuid4().hex[:8]
        self.base = "/api/v1/namespaces/%s" % self.ns

    def tearDown(self):
        self.c.close()

    def create_pod(self, name, **kw):
        code, _, obj = self.c.request("POST", self.base + "/pods", pod_body(name, **kw))
        self.assertEqual(code, 201, obj)
        return obj

    # ---- auth, kubeconfig ----
    def test_auth(self):
        code, _, obj = Client(self.srv, token="").request("GET", self.base + "/pods")
        self.assertEqual(code, 401)
        assert_status(self, obj, 401, "Unauthorized")
        code, _, obj = Client(self.srv, token="wrong").request("GET", self.base + "/pods")
        self.assertEqual(code, 401)
        code, _, obj = Client(self.srv, token="").request("GET", "/healthz")
        self.assertEqual((code, obj), (200, "ok"))
        code, _, obj = self.c.request("GET", "/version")
        self.assertEqual(obj["major"], "1")
        # the token may rotate
        self.srv.add_token("rotated")
        code, _, _ = Client(self.srv, token="rotated").request("GET", self.base + "/pods")
        self.assertEqual(code, 200)
        self.srv.remove_token("rotated")

    def test_kubeconfig(self):
        with open(self.srv.kubeconfig_path) as f:
            text = f.read()
        self.assertIn("server: %s" % self.srv.url, text)
        self.assertIn("token: secret-token", text)
        self.assertIn("namespace: compute-sandboxes", text)
        self.assertIn("certificate-authority-data: ", text)
        # the server certificate verifies for 127.0.0.1 and localhost with the CA
        for host in ("127.0.0.1", "localhost"):
            ctx = ssl.create_default_context(cafile=self.srv.ca_path)
            c = http.client.HTTPSConnection(host, self.srv.port, context=ctx, timeout=10)
            c.request("GET", "/healthz")
            self.assertEqual(c.getresponse().status, 200)
            c.close()

    # ---- create / get ----
    def test_create_get(self):
        obj = self.create_pod("p1", labels={"app": "x"})
        md = obj["metadata"]
        self.assertEqual((obj["apiVersion"], obj["kind"]), ("v1", "Pod"))
        self.assertEqual((md["name"], md["namespace"]), ("p1", self.ns))
        self.assertIsInstance(md["resourceVersion"], str)
        int(md["resourceVersion"])
        uuid.UUID(md["uid"])
        self.assertRegex(md["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(obj["status"]["phase"], "Pending")
        self.assertEqual(obj["status"]["qosClass"], "Guaranteed")
        self.assertEqual(obj["spec"]["containers"][0]["resources"]["requests"],
                         {"cpu": "500m", "memory": "256Mi"})
        code, _, got = self.c.request("GET", self.base + "/pods/p1")
        self.assertEqual(code, 200)
        self.assertEqual(got, obj)
        code, _, err = self.c.request("GET", self.base + "/pods/nope")
        self.assertEqual(code, 404)
        assert_status(self, err, 404, "NotFound")
        self.assertEqual(err["details"], {"name": "nope", "kind": "pods"})
        self.assertEqual(err["message"], 'pods "nope" not found')
        # resourceVersion is one global counter
        code, _, pvc = self.c.request("POST", self.base + "/persistentvolumeclaims", pvc_body("w"))
        self.assertEqual(code, 201)
        self.assertGreater(int(pvc["metadata"]["resourceVersion"]), int(md["resourceVersion"]))
        self.assertEqual(pvc["status"], {"phase": "Pending"})
        self.assertEqual(pvc["spec"]["volumeMode"], "Filesystem")

    def test_create_conflict_and_invalid(self):
        self.create_pod("dup")
        code, _, err = self.c.request("POST", self.base + "/pods", pod_body("dup"))
        self.assertEqual(code, 409)
        assert_status(self, err, 409, "AlreadyExists")
        self.assertEqual(err["details"], {"name": "dup", "kind": "pods"})
        code, _, err = self.c.request("POST", self.base + "/pods", pod_body("Bad_Name"))
        self.assertEqual(code, 422)
        assert_status(self, err, 422, "Invalid")
        self.assertEqual(err["details"]["kind"], "Pod")
        self.assertEqual(err["details"]["causes"][0]["field"], "metadata.name")
        body = pod_body("nocontainers")
        body["spec"]["containers"] = []
        code, _, err = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 422)
        self.assertIn("spec.containers: Required value", err["message"])
        body = pvc_body("nomodes")
        del body["spec"]["accessModes"]
        code, _, err = self.c.request("POST", self.base + "/persistentvolumeclaims", body)
        self.assertEqual(code, 422)
        body = pvc_body("nosize")
        del body["spec"]["resources"]
        code, _, err = self.c.request("POST", self.base + "/persistentvolumeclaims", body)
        self.assertEqual(code, 422)
        self.assertIn("spec.resources[storage]: Required value", err["message"])
        code, _, err = self.c.request("POST", self.base + "/pods", b"{not json")
        self.assertEqual(code, 400)
        assert_status(self, err, 400, "BadRequest")
        body = pod_body("x")
        body["metadata"]["namespace"] = "other"
        code, _, err = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 400)
        # generateName
        body = pod_body("")
        body["metadata"] = {"generateName": "gen-"}
        code, _, obj = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 201)
        self.assertRegex(obj["metadata"]["name"], r"^gen-[a-z0-9]{5}$")
        code, _, _ = self.c.request("GET", "/api/v1/namespaces/%s/nothings" % self.ns)
        self.assertEqual(code, 404)

    # ---- update / patch ----
    def test_put_conflict_and_noop(self):
        obj = self.create_pod("u1")
        rv = obj["metadata"]["resourceVersion"]
        obj["metadata"]["labels"] = {"k": "v"}
        code, _, upd = self.c.request("PUT", self.base + "/pods/u1", obj)
        self.assertEqual(code, 200, upd)
        self.assertEqual(upd["metadata"]["labels"], {"k": "v"})
        self.assertGreater(int(upd["metadata"]["resourceVersion"]), int(rv))
        # stale resourceVersion: 409 Conflict
        code, _, err = self.c.request("PUT", self.base + "/pods/u1", obj)
        self.assertEqual(code, 409)
        assert_status(self, err, 409, "Conflict")
        self.assertIn("the object has been modified", err["message"])
        # a no-op update does not move the resourceVersion
        code, _, same = self.c.request("PUT", self.base + "/pods/u1", upd)
        self.assertEqual(code, 200)
        self.assertEqual(same["metadata"]["resourceVersion"], upd["metadata"]["resourceVersion"])
        # status is ignored on the main resource, spec on the status subresource
        upd2 = json.loads(json.dumps(same))
        upd2["status"]["phase"] = "Running"
        code, _, r = self.c.request("PUT", self.base + "/pods/u1", upd2)
        self.assertEqual(r["status"]["phase"], "Pending")
        code, _, r = self.c.request("PUT", self.base + "/pods/u1/status", upd2)
        self.assertEqual((code, r["status"]["phase"]), (200, "Running"))
        # forbidden pod spec change
        r["spec"]["restartPolicy"] = "Always"
        code, _, err = self.c.request("PUT", self.base + "/pods/u1", r)
        self.assertEqual(code, 422)
        self.assertIn("pod updates may not change fields", err["message"])
        # name mismatch
        r["metadata"]["name"] = "other"
        code, _, err = self.c.request("PUT", self.base + "/pods/u1", r)
        self.assertEqual(code, 400)
        code, _, err = self.c.request("PUT", self.base + "/pods/missing", pod_body("missing"))
        self.assertEqual(code, 404)

    def test_patch(self):
        obj = self.create_pod("pt", labels={"a": "1", "b": "2"})
        rv = obj["metadata"]["resourceVersion"]
        code, _, r = self.c.request("PATCH", self.base + "/pods/pt",
                                    {"metadata": {"labels": {"a": None, "c": "3"},
                                                  "annotations": {"x/y": "z"}}},
                                    "application/merge-patch+json")
        self.assertEqual(code, 200, r)
        self.assertEqual(r["metadata"]["labels"], {"b": "2", "c": "3"})
        self.assertEqual(r["metadata"]["annotations"], {"x/y": "z"})
        # resourceVersion precondition
        code, _, err = self.c.request("PATCH", self.base + "/pods/pt",
                                      {"metadata": {"resourceVersion": rv, "labels": {"d": "4"}}},
                                      "application/merge-patch+json")
        self.assertEqual(code, 409)
        assert_status(self, err, 409, "Conflict")
        code, _, r2 = self.c.request("PATCH", self.base + "/pods/pt",
                                     {"metadata": {"resourceVersion": r["metadata"]["resourceVersion"],
                                                   "labels": {"d": "4"}}},
                                     "application/merge-patch+json")
        self.assertEqual(code, 200)
        # strategic merge on the status subresource merges conditions by type
        st = {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}}
        code, _, r3 = self.c.request("PATCH", self.base + "/pods/pt/status", st,
                                     "application/strategic-merge-patch+json")
        self.assertEqual(code, 200, r3)
        code, _, r3 = self.c.request("PATCH", self.base + "/pods/pt/status",
                                     {"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
                                                 "conditions": [{"type": "Ready", "status": "True"}]}},
                                     "application/strategic-merge-patch+json")
        self.assertEqual({c["type"]: c["status"] for c in r3["status"]["conditions"]},
                         {"Ready": "True", "Initialized": "True"})
        self.assertEqual(r3["metadata"]["labels"], r2["metadata"]["labels"])
        # JSON patch
        code, _, r4 = self.c.request("PATCH", self.base + "/pods/pt",
                                     [{"op": "add", "path": "/metadata/labels/e", "value": "5"}],
                                     "application/json-patch+json")
        self.assertEqual((code, r4["metadata"]["labels"]["e"]), (200, "5"))
        code, _, err = self.c.request("PATCH", self.base + "/pods/pt", {"a": 1}, "text/plain")
        self.assertEqual(code, 415)
        code, _, err = self.c.request("PATCH", self.base + "/pods/none", {"metadata": {}},
                                      "application/merge-patch+json")
        self.assertEqual(code, 404)

    # ---- list ----
    def test_list_paging_and_selectors(self):
        for i in range(5):
            self.create_pod("l%d" % i, labels={"idx": str(i), "even": str(i % 2 == 0).lower()})
        code, _, lst = self.c.request("GET", self.base + "/pods")
        self.assertEqual((lst["kind"], lst["apiVersion"]), ("PodList", "v1"))
        self.assertEqual([p["metadata"]["name"] for p in lst["items"]], ["l0", "l1", "l2", "l3", "l4"])
        code, _, p1 = self.c.request("GET", self.base + "/pods?limit=2")
        self.assertEqual(len(p1["items"]), 2)
        self.assertTrue(p1["metadata"]["continue"])
        self.assertEqual(p1["metadata"]["remainingItemCount"], 3)
        self.create_pod("l5")  # not in the snapshot the continuation serves
        names = [p["metadata"]["name"] for p in p1["items"]]
        cont = p1["metadata"]["continue"]
        while cont:
            code, _, pg = self.c.request("GET", self.base + "/pods?limit=2&continue=" +
                                         urllib.parse.quote(cont))
            self.assertEqual(code, 200)
            self.assertEqual(pg["metadata"]["resourceVersion"], p1["metadata"]["resourceVersion"])
            names += [p["metadata"]["name"] for p in pg["items"]]
            cont = pg["metadata"].get("continue")
        self.assertEqual(names, ["l0", "l1", "l2", "l3", "l4"])
        # a compacted continuation: 410 Expired
        self.srv.compact()
        code, _, err = self.c.request("GET", self.base + "/pods?limit=2&continue=" +
                                      urllib.parse.quote(p1["metadata"]["continue"]))
        self.assertEqual(code, 410)
        assert_status(self, err, 410, "Expired")

        def names_for(q):
            code, _, r = self.c.request("GET", self.base + "/pods?" + q)
            self.assertEqual(code, 200, r)
            return [p["metadata"]["name"] for p in r["items"]]
        self.assertEqual(names_for("labelSelector=even%3Dtrue"), ["l0", "l2", "l4"])
        self.assertEqual(names_for("labelSelector=even%3D%3Dtrue%2Cidx!%3D2"), ["l0", "l4"])
        self.assertEqual(names_for("labelSelector=" + urllib.parse.quote("idx in (1, 3)")), ["l1", "l3"])
        self.assertEqual(names_for("labelSelector=" + urllib.parse.quote("idx notin (1,3),even")),
                         ["l0", "l2", "l4"])
        self.assertEqual(names_for("labelSelector=" + urllib.parse.quote("!idx")), ["l5"])
        self.assertEqual(names_for("fieldSelector=metadata.name%3Dl3"), ["l3"])
        self.assertEqual(names_for("fieldSelector=status.phase%3DPending%2Cmetadata.name!%3Dl0"),
                         ["l1", "l2", "l3", "l4", "l5"])
        self.assertEqual(names_for("fieldSelector=spec.nodeName%3D"), ["l0", "l1", "l2", "l3", "l4", "l5"])
        code, _, err = self.c.request("GET", self.base + "/pods?fieldSelector=spec.foo%3Dx")
        self.assertEqual(code, 400)
        code, _, err = self.c.request("GET", self.base + "/pods?labelSelector=" +
                                      urllib.parse.quote("a in b"))
        self.assertEqual(code, 400)
        # all namespaces
        code, _, r = self.c.request("GET", "/api/v1/pods?fieldSelector=metadata.namespace%3D" + self.ns)
        self.assertEqual(len(r["items"]), 6)

    # ---- watch ----
    def test_watch_framing_and_events(self):
        self.create_pod("w0")
        code, _, lst = self.c.request("GET", self.base + "/pods")
        rv = lst["metadata"]["resourceVersion"]
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % rv)
        self.assertEqual(w.resp.status, 200)
        self.assertEqual(w.resp.getheader("Transfer-Encoding"), "chunked")
        self.assertEqual(w.resp.getheader("Content-Type"), "application/json")
        obj = self.create_pod("w1")
        self.c.request("PATCH", self.base + "/pods/w1", {"metadata": {"labels": {"x": "y"}}},
                       "application/merge-patch+json")
        self.c.request("DELETE", self.base + "/pods/w1")
        evs = [w.next() for _ in range(3)]
        self.assertEqual([e["type"] for e in evs], ["ADDED", "MODIFIED", "DELETED"])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
        self.assertEqual(rvs, sorted(rvs))
        self.assertGreater(rvs[0], int(rv))
        self.assertEqual(evs[0]["object"]["metadata"]["uid"], obj["metadata"]["uid"])
        self.assertEqual(evs[2]["object"]["metadata"]["labels"], {"x": "y"})
        w.close()
        # resourceVersion "0" / unset: synthetic ADDED for what exists, then changes
        for rvq in ("&resourceVersion=0", ""):
            w = self.c.watch(self.base + "/pods?watch=true" + rvq)
            ev = w.next()
            self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("ADDED", "w0"))
            w.close()
        # events from an older resourceVersion are replayed
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % rv)
        self.assertEqual([w.next()["type"] for _ in range(3)], ["ADDED", "MODIFIED", "DELETED"])
        w.close()

    def test_watch_raw_chunks(self):
        """The bytes on the wire: chunked, one JSON object per line, a terminating chunk."""
        ctx = ssl.create_default_context(cafile=self.srv.ca_path)
        import socket
        s = ctx.wrap_socket(socket.create_connection((self.srv.host, self.srv.port)),
                            server_hostname="127.0.0.1")
        self.create_pod("raw")
        s.sendall(("GET %s/pods?watch=1&resourceVersion=0&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer secret-token\r\n\r\n" % self.base).encode())
        data = b""
        s.settimeout(10)
        while not data.endswith(b"\r\n0\r\n\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, body = data.split(b"\r\n\r\n", 1)
        self.assertIn(b"Transfer-Encoding: chunked", head)
        size_line, rest = body.split(b"\r\n", 1)
        size = int(size_line, 16)
        line = rest[:size]
        self.assertTrue(line.endswith(b"}\n"))
        self.assertEqual(json.loads(line)["type"], "ADDED")
        self.assertTrue(body.endswith(b"\r\n0\r\n\r\n"))

    def test_watch_410_and_bookmarks_and_timeout(self):
        obj = self.create_pod("b0")
        old_rv = obj["metadata"]["resourceVersion"]
        self.create_pod("b1")
        self.srv.compact()
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % old_rv)
        self.assertEqual(w.resp.status, 200)
        ev = w.next()
        self.assertEqual(ev["type"], "ERROR")
        assert_status(self, ev["object"], 410, "Expired")
        self.assertIn("too old resource version", ev["object"]["message"])
        self.assertIsNone(w.next())
        w.close()
        # bookmarks
        self.srv.bookmark_interval = 0.3
        cur = str(self.srv.resource_version)
        w = self.c.watch(self.base + "/pods?watch=1&allowWatchBookmarks=true&resourceVersion=%s" % cur)
        ev = w.next()
        self.assertEqual(ev["type"], "BOOKMARK")
        self.assertEqual(ev["object"]["kind"], "Pod")
        self.assertEqual(ev["object"]["apiVersion"], "v1")
        self.assertGreaterEqual(int(ev["object"]["metadata"]["resourceVersion"]), int(cur))
        w.close()
        # timeoutSeconds: the stream ends cleanly
        t0 = time.time()
        w = self.c.watch(self.base + "/pods?watch=1&timeoutSeconds=1&resourceVersion=%s" % cur)
        self.assertIsNone(w.next())
        self.assertLess(time.time() - t0, 5)
        w.close()
        # sendInitialEvents: initial ADDED events then a bookmark marking their end
        w = self.c.watch(self.base + "/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                         "&resourceVersionMatch=NotOlderThan&resourceVersion=")
        evs = [w.next(), w.next(), w.next()]
        self.assertEqual([e["type"] for e in evs], ["ADDED", "ADDED", "BOOKMARK"])
        self.assertEqual(evs[2]["object"]["metadata"]["annotations"],
                         {"k8s.io/initial-events-end": "true"})
        w.close()

    def test_watch_selector_transitions(self):
        self.create_pod("s0", labels={"sel": "yes"})
        cur = str(self.srv.resource_version)
        w = self.c.watch(self.base + "/pods?watch=1&labelSelector=sel%%3Dyes&resourceVersion=%s" % cur)
        self.c.request("PATCH", self.base + "/pods/s0", {"metadata": {"labels": {"sel": "no"}}},
                       "application/merge-patch+json")
        self.create_pod("s1", labels={"sel": "no"})
        self.c.request("PATCH", self.base + "/pods/s1", {"metadata": {"labels": {"sel": "yes"}}},
                       "application/merge-patch+json")
        e1, e2 = w.next(), w.next()
        self.assertEqual((e1["type"], e1["object"]["metadata"]["name"]), ("DELETED", "s0"))
        self.assertEqual((e2["type"], e2["object"]["metadata"]["name"]), ("ADDED", "s1"))
        w.close()
        # field selector on spec.nodeName
        w = self.c.watch(self.base + "/pods?watch=1&fieldSelector=spec.nodeName%%3Dn1&resourceVersion=%s"
                         % self.srv.resource_version)
        self.create_pod("s2")
        code, _, st = self.c.request("POST", self.base + "/pods/s2/binding",
                                     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "s2"},
                                      "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
        self.assertEqual(code, 201, st)
        ev = w.next()
        self.assertEqual((ev["type"], ev["object"]["spec"]["nodeName"]), ("ADDED", "n1"))
        w.close()

    # ---- binding and deletion ----
    def test_binding(self):
        self.create_pod("bd")
        bind = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bd"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}}
        code, _, st = self.c.request("POST", self.base + "/pods/bd/binding", bind)
        self.assertEqual(code, 201)
        self.assertEqual((st["kind"], st["status"]), ("Status", "Success"))
        code, _, p = self.c.request("GET", self.base + "/pods/bd")
        self.assertEqual(p["spec"]["nodeName"], "node-a")
        self.assertEqual([c["type"] for c in p["status"]["conditions"]], ["PodScheduled"])
        code, _, err = self.c.request("POST", self.base + "/pods/bd/binding", bind)
        self.assertEqual(code, 409)
        assert_status(self, err, 409, "Conflict")
        # setting spec.nodeName by update is forbidden (only binding does it)
        p["spec"]["nodeName"] = "node-b"
        code, _, err = self.c.request("PUT", self.base + "/pods/bd", p)
        self.assertEqual(code, 422)

    def test_graceful_pod_deletion(self):
        self.create_pod("gd", node="node-a")
        cur = str(self.srv.resource_version)
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % cur)
        code, _, r = self.c.request("DELETE", self.base + "/pods/gd")
        self.assertEqual(code, 200, r)
        self.assertEqual(r["kind"], "Pod")
        self.assertEqual(r["metadata"]["deletionGracePeriodSeconds"], 5)
        self.assertTrue(r["metadata"]["deletionTimestamp"])
        ev = w.next()
        self.assertEqual(ev["type"], "MODIFIED")
        self.assertTrue(ev["object"]["metadata"]["deletionTimestamp"])
        code, _, again = self.c.request("GET", self.base + "/pods/gd")
        self.assertEqual(code, 200)
        # a longer grace period does not extend it; a repeated delete is a no-op
        code, _, r2 = self.c.request("DELETE", self.base + "/pods/gd?gracePeriodSeconds=60")
        self.assertEqual((code, r2["metadata"]["deletionGracePeriodSeconds"]), (200, 5))
        # the kubelet's final delete: grace 0 with a uid precondition
        code, _, err = self.c.request("DELETE", self.base + "/pods/gd",
                                      {"kind": "DeleteOptions", "apiVersion": "v1",
                                       "gracePeriodSeconds": 0,
                                       "preconditions": {"uid": str(uuid.uuid4())}})
        self.assertEqual(code, 409)
        assert_status(self, err, 409, "Conflict")
        self.assertIn("Precondition failed: UID in precondition", err["message"])
        code, _, err = self.c.request("DELETE", self.base + "/pods/gd",
                                      {"preconditions": {"resourceVersion": "1"}})
        self.assertEqual(code, 409)
        code, _, r3 = self.c.request("DELETE", self.base + "/pods/gd",
                                     {"kind": "DeleteOptions", "apiVersion": "v1",
                                      "gracePeriodSeconds": 0,
                                      "preconditions": {"uid": r["metadata"]["uid"]}})
        self.assertEqual(code, 200, r3)
        ev = w.next()
        self.assertEqual(ev["type"], "DELETED")
        self.assertGreater(int(ev["object"]["metadata"]["resourceVersion"]),
                           int(r["metadata"]["resourceVersion"]))
        code, _, _ = self.c.request("GET", self.base + "/pods/gd")
        self.assertEqual(code, 404)
        code, _, err = self.c.request("DELETE", self.base + "/pods/gd")
        self.assertEqual(code, 404)
        w.close()
        # an unbound pod goes at once; so does a PVC
        self.create_pod("unbound")
        code, _, r = self.c.request("DELETE", self.base + "/pods/unbound")
        self.assertEqual((code, r["kind"]), (200, "Pod"))
        code, _, _ = self.c.request("GET", self.base + "/pods/unbound")
        self.assertEqual(code, 404)
        self.c.request("POST", self.base + "/persistentvolumeclaims", pvc_body("pv"))
        code, _, r = self.c.request("DELETE", self.base + "/persistentvolumeclaims/pv")
        self.assertEqual(code, 200)
        code, _, _ = self.c.request("GET", self.base + "/persistentvolumeclaims/pv")
        self.assertEqual(code, 404)
        # gracePeriodSeconds from the query
        self.create_pod("q", node="node-a")
        code, _, r = self.c.request("DELETE", self.base + "/pods/q?gracePeriodSeconds=2")
        self.assertEqual(r["metadata"]["deletionGracePeriodSeconds"], 2)
        code, _, r = self.c.request("DELETE", self.base + "/pods/q?gracePeriodSeconds=0")
        self.assertEqual(code, 200)
        self.assertIsNone(self.srv.get("pods", self.ns, "q"))

    def test_finalizers(self):
        body = pvc_body("fin")
        body["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
        self.c.request("POST", self.base + "/persistentvolumeclaims", body)
        code, _, r = self.c.request("DELETE", self.base + "/persistentvolumeclaims/fin")
        self.assertEqual(code, 200)
        self.assertTrue(r["metadata"]["deletionTimestamp"])
        self.assertIsNotNone(self.srv.get("persistentvolumeclaims", self.ns, "fin"))
        code, _, r = self.c.request("PATCH", self.base + "/persistentvolumeclaims/fin",
                                    {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        self.assertEqual(code, 200)
        self.assertIsNone(self.srv.get("persistentvolumeclaims", self.ns, "fin"))

    # ---- faults ----
    def test_faults_errors_and_latency(self):
        self.srv.fail_next(2, 500)
        codes = [self.c.request("GET", self.base + "/pods")[0] for _ in range(3)]
        self.assertEqual(codes, [500, 500, 200])
        self.srv.fail_next(1, 429, retry_after=2)
        code, resp, err = self.c.request("GET", self.base + "/pods")
        self.assertEqual(code, 429)
        self.assertEqual(resp.getheader("Retry-After"), "2")
        assert_status(self, err, 429, "TooManyRequests")
        self.assertEqual(err["details"]["retryAfterSeconds"], 2)
        # only matching requests fail
        self.srv.fail_next(1, 500, method="POST", path=r"/pods$")
        self.assertEqual(self.c.request("GET", self.base + "/pods")[0], 200)
        code, _, err = self.c.request("POST", self.base + "/pods", pod_body("f1"))
        self.assertEqual(code, 500)
        assert_status(self, err, 500, "InternalError")
        self.assertEqual(self.c.request("POST", self.base + "/pods", pod_body("f1"))[0], 201)
        # for a while
        self.srv.fail_for(0.5, 503)
        self.assertEqual(self.c.request("GET", self.base + "/pods")[0], 503)
        time.sleep(0.6)
        self.assertEqual(self.c.request("GET", self.base + "/pods")[0], 200)
        self.srv.add_latency(0.5, count=1)
        t0 = time.time()
        self.c.request("GET", self.base + "/pods")
        self.assertGreaterEqual(time.time() - t0, 0.5)
        # the HTTP control endpoint needs the token
        code, _, _ = Client(self.srv, token="").request("POST", "/_test/faults", {"action": "clear"})
        self.assertEqual(code, 401)
        code, _, r = self.c.request("POST", "/_test/faults",
                                    {"action": "fail", "status": 500, "count": 1, "path": "pods"})
        self.assertEqual(code, 200)
        self.assertEqual(self.c.request("GET", self.base + "/pods")[0], 500)
        code, _, r = self.c.request("GET", "/_test/faults")
        self.assertEqual(r["faults"], [])

    def test_faults_drop_watches_and_restart(self):
        self.create_pod("d0")
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % self.srv.resource_version)
        time.sleep(0.2)
        self.srv.drop_watches()
        with self.assertRaises((http.client.IncompleteRead, ConnectionError, ssl.SSLError, OSError)):
            w.next()
        w.close()
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % self.srv.resource_version)
        time.sleep(0.2)
        self.srv.drop_watches(clean=True)
        self.assertIsNone(w.next())
        w.close()
        port = self.srv.port
        rv = self.srv.resource_version
        w = self.c.watch(self.base + "/pods?watch=1&resourceVersion=%s" % rv)
        self.srv.restart(down_seconds=0.3)
        self.assertEqual(self.srv.port, port)
        with self.assertRaises((http.client.IncompleteRead, ConnectionError, ssl.SSLError, OSError)):
            w.next()
        w.close()
        self.c.close()
        code, _, p = self.c.request("GET", self.base + "/pods/d0")
        self.assertEqual(code, 200)
        self.assertEqual(self.srv.resource_version, rv)
        # via the endpoint
        code, _, _ = self.c.request("POST", "/_test/faults", {"action": "restart", "down_seconds": 0.5})
        self.assertEqual(code, 200)
        time.sleep(0.3)
        self.c.close()
        deadline = time.time() + 10
        while True:
            try:
                code, _, _ = self.c.request("GET", self.base + "/pods/d0")
                break
            except OSError:
                self.c.close()
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        self.assertEqual(code, 200)

    def test_concurrent_creates_one_wins(self):
        results = []

        def worker():
            c = Client(self.srv)
            results.append(c.request("POST", self.base + "/pods", pod_body("race"))[0])
            c.close()
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(sorted(results), [201] + [409] * 7)


# --------------------------------------------------------------------------------------------
# The simulated kubelet with real runsc containers
# --------------------------------------------------------------------------------------------

# Without root or runsc these tests cannot run: they are skipped, which testmain reports (ctest:
# "Skipped") and turns into a failure in CI. cri.py is part of the tree: its absence is an
# import error, not a skip.
def _kubelet_skip_reason():
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("runsc") is None:
        return "needs runsc"
    return None


@unittest.skipIf(_kubelet_skip_reason(), _kubelet_skip_reason() or "")
class KubeletSimTest(unittest.TestCase):
    def setUp(self):
        import kubelet_sim
        self.tmp = tempfile.mkdtemp(prefix="compute-test-kubelet-")
        self.srv = apiserver.ApiServer(os.path.join(self.tmp, "api"), token="tok",
                                       bookmark_interval=1.0)
        self.srv.start()
        self.runsc_root = os.path.join(self.tmp, "runsc-root")
        os.makedirs(self.runsc_root)
        self.sim = kubelet_sim.KubeletSim(
            kubeconfig=self.srv.kubeconfig_path, node_name="node-1",
            state_dir=os.path.join(self.tmp, "node"), runsc_root=self.runsc_root,
            cgroup_prefix="compute-test-kubelet-%s" % uuid.uuid4().hex[:8])
        self.sim.start()
        self.c = Client(self.srv)
        self.ns = "compute-sandboxes"
        self.base = "/api/v1/namespaces/%s" % self.ns

    def tearDown(self):
        self.c.close()
        try:
            self.sim.stop(cleanup=True)
        finally:
            self.srv.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def runsc(self, *args, check=True):
        return subprocess.run(["runsc", "--root", self.runsc_root] + list(args), input="",
                              capture_output=True, text=True, check=check, timeout=60)

    def wait(self, pred, timeout=60, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = pred()
            if r:
                return r
            time.sleep(0.2)
        self.fail("timed out waiting for " + what)

    def test_pod_lifecycle(self):
        code, _, pvc = self.c.request("POST", self.base + "/persistentvolumeclaims", pvc_body("ws-1"))
        self.assertEqual(code, 201)
        body = pod_body("sbx-1", runtimeClassName="gvisor", activeDeadlineSeconds=900)
        c0 = body["spec"]["containers"][0]
        c0["command"] = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
        c0["volumeMounts"] = [{"name": "workspace", "mountPath": "/workspace"}]
        body["spec"]["volumes"] = [{"name": "workspace", "persistentVolumeClaim": {"claimName": "ws-1"}}]
        code, _, pod = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 201, pod)

        def ready():
            p = self.srv.get("pods", self.ns, "sbx-1")
            conds = {c["type"]: c["status"] for c in p["status"].get("conditions") or []}
            return p if p["status"].get("phase") == "Running" and conds.get("Ready") == "True" else None
        p = self.wait(ready, what="pod Running and Ready")
        self.assertEqual(p["spec"]["nodeName"], "node-1")
        pvc = self.srv.get("persistentvolumeclaims", self.ns, "ws-1")
        self.assertEqual(pvc["status"]["phase"], "Bound")
        self.assertTrue(pvc["spec"]["volumeName"])
        st = p["status"]
        self.assertTrue(st["podIP"] and st["hostIP"] and st["startTime"])
        self.assertEqual({c["type"] for c in st["conditions"]},
                         {"PodScheduled", "Initialized", "ContainersReady", "Ready"})
        cs = st["containerStatuses"][0]
        self.assertEqual((cs["name"], cs["ready"], cs["started"]), ("sandbox", True, True))
        self.assertTrue(cs["state"]["running"]["startedAt"])
        self.assertTrue(cs["containerID"].startswith("containerd://"))
        app_id = cs["containerID"][len("containerd://"):]
        # the PVC's host directory is the container's /workspace, both ways
        host_dir = self.sim.volume_dir(pvc)
        with open(os.path.join(host_dir, "from-host"), "w") as f:
            f.write("hello")
        r = self.runsc("exec", app_id, "/bin/cat", "/workspace/from-host")
        self.assertEqual(r.stdout, "hello")
        self.runsc("exec", app_id, "/bin/sh", "-c", "echo inside > /workspace/from-sandbox")
        with open(os.path.join(host_dir, "from-sandbox")) as f:
            self.assertEqual(f.read(), "inside\n")
        # the root is the image's directory, writable into memory only; never the host's
        image_dir = self.sim.cri.image_rootfs("debian:bookworm-compute")
        marker = "m-" + uuid.uuid4().hex[:8]
        r = self.runsc("exec", app_id, "/bin/sh", "-c",
                       "grep VERSION_CODENAME /etc/os-release; echo x > /etc/%s; "
                       "echo y > /tmp/%s; cat /etc/%s /tmp/%s; ls -la / >/dev/null && echo ls-ok; "
                       "test -e %s || echo no-node-dir" % (marker, marker, marker, marker,
                                                           self.sim.state_dir))
        self.assertEqual(r.stdout, "VERSION_CODENAME=bookworm\nx\ny\nls-ok\nno-node-dir\n",
                         r.stderr)
        self.assertFalse(os.path.exists(os.path.join(image_dir, "etc", marker)))
        self.assertFalse(os.path.exists(os.path.join(image_dir, "tmp", marker)))
        # the bundle carries containerd's annotations
        state = json.loads(self.runsc("state", app_id).stdout)
        with open(os.path.join(state["bundle"], "config.json")) as f:
            ann = json.load(f)["annotations"]
        self.assertEqual(ann["io.kubernetes.cri.sandbox-name"], "sbx-1")
        self.assertEqual(ann["io.kubernetes.cri.sandbox-namespace"], self.ns)
        self.assertEqual(ann["io.kubernetes.cri.sandbox-uid"], pod["metadata"]["uid"])
        self.assertEqual(ann["io.kubernetes.cri.container-name"], "sandbox")
        # delete: graceful, the kubelet stops the containers and removes the object
        code, _, r = self.c.request("DELETE", self.base + "/pods/sbx-1")
        self.assertEqual(code, 200)
        self.assertTrue(r["metadata"]["deletionTimestamp"])
        self.wait(lambda: self.srv.get("pods", self.ns, "sbx-1") is None, what="pod deleted")
        listed = json.loads(self.runsc("list", "--format=json").stdout or "[]") or []
        self.assertEqual([c for c in listed if c["id"] == app_id], [])

    def test_image_pull_failure(self):
        # An image this node does not have (or a reference that would name something else
        # than an image directory: never the host's root): Pending, the container Waiting
        # with ErrImagePull, then ImagePullBackOff, and nothing started.
        import cri
        for ref in ("/", "..", "../../..", "debian:bookworm-compute/../..", "no-such-image:1"):
            with self.assertRaises(cri.ImagePullError, msg=ref):
                self.sim.cri.image_rootfs(ref)
        self.assertEqual(self.sim.cri.image_rootfs("docker.io/library/debian:bookworm-compute"),
                         self.sim.cri.image_rootfs("debian:bookworm-compute"))
        body = pod_body("nopull", runtimeClassName="gvisor")
        body["spec"]["containers"][0]["image"] = "registry.example/no-such-image:1"
        code, _, _ = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 201)
        reasons = set()

        def waiting():
            p = self.srv.get("pods", self.ns, "nopull")
            st = p["status"]
            w = (st.get("containerStatuses") or [{}])[0].get("state", {}).get("waiting") or {}
            if w.get("reason"):
                reasons.add(w["reason"])
                self.assertEqual(st["phase"], "Pending")
                self.assertIn("registry.example/no-such-image:1", w.get("message", ""))
            return reasons >= {"ErrImagePull", "ImagePullBackOff"}
        self.wait(waiting, what="ErrImagePull then ImagePullBackOff")
        self.assertEqual(reasons, {"ErrImagePull", "ImagePullBackOff"})
        self.assertEqual(self.sim.running_pods(), [])
        self.assertEqual(json.loads(self.runsc("list", "--format=json").stdout or "[]") or [], [])
        code, _, _ = self.c.request("DELETE", self.base + "/pods/nopull")
        self.wait(lambda: self.srv.get("pods", self.ns, "nopull") is None, what="deleted")

    def test_container_exit(self):
        for name, sig, phase, code in (("ok", "TERM", "Succeeded", 0), ("killed", "KILL", "Failed", 137)):
            body = pod_body("exit-" + name, runtimeClassName="gvisor")
            self.c.request("POST", self.base + "/pods", body)
            p = self.wait(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
                self.srv.get("pods", self.ns, "exit-" + name)), what="Running")
            app_id = p["status"]["containerStatuses"][0]["containerID"][len("containerd://"):]

            # The app is a shell as PID 1: a TERM that comes before its trap is set is dropped
            # (an init gets only the signals it handles; under load the pod is Running first),
            # so the test sends it again until the pod ends.
            def ended():
                p = self.srv.get("pods", self.ns, "exit-" + name)
                if p["status"].get("phase") in ("Succeeded", "Failed"):
                    return p
                self.runsc("kill", app_id, sig, check=False)
                time.sleep(0.5)
                return None
            p = self.wait(ended, what="a terminal phase")
            self.assertEqual(p["status"]["phase"], phase)
            term = p["status"]["containerStatuses"][0]["state"]["terminated"]
            self.assertEqual(term["exitCode"], code)
            self.assertEqual({c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"], "False")
        self.wait(lambda: self.sim.running_pods() == [], what="containers stopped")
        # a terminated pod is deleted at once (grace 0 for terminal pods)
        code, _, _ = self.c.request("DELETE", self.base + "/pods/exit-ok")
        self.assertIsNone(self.srv.get("pods", self.ns, "exit-ok"))

    def test_restart_adopts_containers(self):
        import kubelet_sim
        self.c.request("POST", self.base + "/pods", pod_body("adopt", runtimeClassName="gvisor"))
        p = self.wait(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
            self.srv.get("pods", self.ns, "adopt")), what="Running")
        self.sim.stop(cleanup=False)  # a kubelet restart: the containers stay
        self.sim = kubelet_sim.KubeletSim(
            kubeconfig=self.srv.kubeconfig_path, node_name="node-1",
            state_dir=self.sim.state_dir, runsc_root=self.runsc_root,
            cgroup_prefix=self.sim.cri.prefix.strip("/"))
        self.sim.start()
        self.assertEqual(self.sim.running_pods(), [(self.ns, "adopt")])
        time.sleep(2)
        p2 = self.srv.get("pods", self.ns, "adopt")
        self.assertEqual(p2["status"]["containerStatuses"][0]["containerID"],
                         p["status"]["containerStatuses"][0]["containerID"])
        self.assertEqual(p2["status"]["phase"], "Running")
        self.c.request("DELETE", self.base + "/pods/adopt")
        self.wait(lambda: self.srv.get("pods", self.ns, "adopt") is None, what="deleted")
        self.assertEqual(self.sim.running_pods(), [])

    def test_deadline_and_faults(self):
        self.c.request("POST", self.base + "/persistentvolumeclaims", pvc_body("ws-2"))
        body = pod_body("sbx-2", runtimeClassName="gvisor", activeDeadlineSeconds=4)
        body["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "sleep 3600"]
        body["spec"]["containers"][0]["volumeMounts"] = [{"name": "w", "mountPath": "/workspace"}]
        body["spec"]["volumes"] = [{"name": "w", "persistentVolumeClaim": {"claimName": "ws-2"}}]
        code, _, _ = self.c.request("POST", self.base + "/pods", body)
        self.assertEqual(code, 201)
        # the API misbehaves while the pod starts: the kubelet recovers
        self.srv.fail_for(1.5, 500, path="pods")
        self.srv.drop_watches()
        time.sleep(1.6)
        self.srv.fail_next(3, 429, retry_after=1)
        self.srv.compact()
        self.srv.drop_watches()
        p = self.wait(lambda: (lambda p: p if p and p["status"].get("phase") == "Failed" else None)(
            self.srv.get("pods", self.ns, "sbx-2")), timeout=60, what="DeadlineExceeded")
        self.assertEqual(p["status"]["reason"], "DeadlineExceeded")
        self.assertEqual(self.sim.running_pods(), [])
        # a pod of a runtime class it does not serve is left alone
        self.c.request("POST", self.base + "/pods", pod_body("other", runtimeClassName="runc"))
        time.sleep(2)
        self.assertNotIn("nodeName", self.srv.get("pods", self.ns, "other")["spec"])


if __name__ == "__main__":
    testmain.main(sys.argv)
