#!/usr/bin/python3
"""A test Kubernetes API server for the kube mode tests (no real API server can be installed here).

It serves the core/v1 resources the frontend and the simulated kubelet use, with the real REST and
watch semantics: pods (with the status subresource and pods/binding) and persistentvolumeclaims;
namespaces are implicit (every namespace exists). HTTPS with its own CA, HTTP/1.1, bearer tokens.

What it follows from the real kube-apiserver:
- objects as Kubernetes returns them (apiVersion, kind, metadata with uid, one global resourceVersion
  counter as a string, creationTimestamp, generation, managedFields; spec defaults; status),
- POST 201 / 409 AlreadyExists / 422 Invalid, GET 200 / 404, PUT with the resourceVersion check (409
  Conflict), PATCH (merge, strategic merge, JSON patch) with a metadata.resourceVersion precondition,
  DELETE with graceful deletion of bound pods, finalizers, and DeleteOptions.preconditions,
- Status bodies for every error, no-op updates that do not bump the resourceVersion,
- list paging (limit/continue, served from a consistent snapshot; 410 when it is compacted),
- label and field selectors on list and watch,
- watch: chunked, one JSON event per line, synthetic ADDED for resourceVersion ""/"0", ERROR 410
  Expired for a resourceVersion older than the kept history, BOOKMARK events, timeoutSeconds,
  selector transitions reported as ADDED/DELETED like the watch cache does.

Fault controls (module API and POST /_test/faults, which needs the token): fail requests with
500/429/503/504 (429 with Retry-After), add latency, drop open watches, compact the history, stop
and restart on the same port keeping the objects.

Module use:
    srv = ApiServer(state_dir, token="t")
    srv.start(); srv.url; srv.kubeconfig_path; srv.get("pods", "ns", "name"); srv.fail_next(3, 500)
CLI use:
    /usr/bin/python3 tests/kube/apiserver.py --state-dir DIR   (writes DIR/kubeconfig when ready)
"""

import argparse
import base64
import collections
import copy
import datetime
import fractions
import http.server
import json
import os
import random
import re
import secrets
import select
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

# --------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------

POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
              "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
              "status.podIP", "status.nominatedNodeName")
PVC_FIELDS = ("metadata.name", "metadata.namespace")

RESOURCES = {
    "pods": {"kind": "Pod", "list_kind": "PodList", "fields": POD_FIELDS,
             "subresources": ("status", "binding")},
    "persistentvolumeclaims": {"kind": "PersistentVolumeClaim",
                               "list_kind": "PersistentVolumeClaimList", "fields": PVC_FIELDS,
                               "subresources": ("status",)},
    # Only what the frontend's warm pool needs of them (its per-session guard): create, get,
    # list, delete; an update replaces data.
    "configmaps": {"kind": "ConfigMap", "list_kind": "ConfigMapList", "fields": PVC_FIELDS,
                   "subresources": ()},
}

# The empty object a bookmark carries, as the Go serializer writes it for each kind.
BOOKMARK_BODY = {
    "pods": {"spec": {"containers": None}, "status": {}},
    "persistentvolumeclaims": {"spec": {"resources": {}}, "status": {}},
    "configmaps": {},
}

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                 "'-' or '.', and must start and end with an alphanumeric character (e.g. "
                 "'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339(t=None):
    t = time.time() if t is None else t
    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


# --------------------------------------------------------------------------------------------
# Errors (Status bodies)
# --------------------------------------------------------------------------------------------

class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(resource, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (resource, name),
                    {"name": name, "kind": resource})


def already_exists(resource, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (resource, name),
                    {"name": name, "kind": resource})


def conflict(resource, name, why):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (resource, name, why), {"name": name, "kind": resource})


MODIFIED_MSG = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def invalid(kind, name, errs):
    """errs: list of (field, reason, message) with reason FieldValueRequired/Invalid/..."""
    msgs = ["%s: %s" % (f, m) for f, _, m in errs]
    text = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, text),
                    {"name": name, "group": "", "kind": kind,
                     "causes": [{"reason": r, "message": m, "field": f} for f, r, m in errs]})


def required(field, detail=""):
    return (field, "FieldValueRequired", "Required value" + (": " + detail if detail else ""))


def invalid_value(field, value, detail):
    return (field, "FieldValueInvalid", "Invalid value: %s: %s" % (json.dumps(value), detail))


def unsupported_value(field, value, allowed):
    return (field, "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
            % (json.dumps(value), ", ".join('"%s"' % a for a in allowed)))


def forbidden(field, detail):
    return (field, "FieldValueForbidden", "Forbidden: " + detail)


def expired(message):
    return ApiError(410, "Expired", message)


# --------------------------------------------------------------------------------------------
# Quantities (resource.Quantity parse + canonical form)
# --------------------------------------------------------------------------------------------

_BIN = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QTY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|"
                  r"[eE][+-]?[0-9]+)?$")


def parse_quantity(s):
    """Returns (Fraction value, format) or raises ValueError."""
    if not isinstance(s, (str, int, float)) or isinstance(s, bool):
        raise ValueError("quantities must match the regular expression")
    if isinstance(s, (int, float)):
        s = repr(s)
    m = _QTY.match(s)
    if not m:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num = fractions.Fraction(m.group(1))
    suf = m.group(2) or ""
    if suf in _BIN:
        return num * (2 ** _BIN[suf]), "BinarySI"
    if suf in _DEC:
        return num * fractions.Fraction(10) ** _DEC[suf], "DecimalSI"
    return num * fractions.Fraction(10) ** int(suf[1:]), "DecimalExponent"


def canonical_quantity(s):
    value, fmt = parse_quantity(s)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    # precision is limited to nano units, rounded up
    nanos = value * 10 ** 9
    if nanos.denominator != 1:
        nanos = fractions.Fraction(-(-nanos.numerator // nanos.denominator))
        value = nanos / 10 ** 9
    if fmt == "BinarySI" and (value < 1024 or value.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        v = int(value)
        best = ""
        for suf, exp in sorted(_BIN.items(), key=lambda kv: kv[1]):
            if v % (2 ** exp) == 0:
                best = suf
        return sign + str(v // (2 ** _BIN[best] if best else 1)) + best
    exp = -9
    mant = int(value * 10 ** 9)
    while mant % 1000 == 0 and exp < 18:
        mant //= 1000
        exp += 3
    if fmt == "DecimalExponent":
        return sign + str(mant) + ("e%d" % exp if exp else "")
    suffix = {v: k for k, v in _DEC.items()}[exp]
    return sign + str(mant) + suffix


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------

def _split_top(s):
    """Split at commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_label_selector(s):
    """Returns a list of (key, op, values). Raises ApiError 400 on a syntax error."""
    reqs = []
    if s is None or s.strip() == "":
        return reqs
    key_re = r"(?P<key>[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?)"
    for part in _split_top(s):
        p = part.strip()
        if not p:
            raise bad_request("unable to parse requirement: found '', expected: identifier")
        m = re.match(r"^%s\s+(?P<op>in|notin)\s*\((?P<vals>[^)]*)\)$" % key_re, p)
        if m:
            vals = [v.strip() for v in m.group("vals").split(",")]
            if any(v and not LABEL_VALUE.match(v) for v in vals):
                raise bad_request("unable to parse requirement: invalid label value in %r" % p)
            reqs.append((m.group("key"), m.group("op"), set(vals)))
            continue
        m = re.match(r"^%s\s*(?P<op>==|=|!=)\s*(?P<val>[^=!\s]*)$" % key_re, p)
        if m:
            if not LABEL_VALUE.match(m.group("val")):
                raise bad_request("unable to parse requirement: invalid label value: %r"
                                  % m.group("val"))
            reqs.append((m.group("key"), "!=" if m.group("op") == "!=" else "=", {m.group("val")}))
            continue
        m = re.match(r"^!\s*%s$" % key_re, p)
        if m:
            reqs.append((m.group("key"), "!", None))
            continue
        m = re.match(r"^%s$" % key_re, p)
        if m:
            reqs.append((m.group("key"), "exists", None))
            continue
        raise bad_request("unable to parse requirement: found '%s', expected: identifier" % p)
    return reqs


def label_match(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        if op == "=" or op == "in":
            if not has or labels[key] not in vals:
                return False
        elif op == "!=" or op == "notin":
            if has and labels[key] in vals:
                return False
        elif op == "exists":
            if not has:
                return False
        elif op == "!":
            if has:
                return False
    return True


def parse_field_selector(s, resource):
    reqs = []
    if s is None or s.strip() == "":
        return reqs
    for part in s.split(","):
        p = part.strip()
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", p)
        if not m:
            raise bad_request('invalid selector: \'%s\'; can\'t understand \'%s\'' % (s, p))
        field = m.group(1)
        if field not in RESOURCES[resource]["fields"]:
            raise bad_request('"%s" is not a known field selector: only "%s"'
                              % (field, '", "'.join(RESOURCES[resource]["fields"])))
        reqs.append((field, "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return reqs


def field_value(obj, field):
    cur = obj
    for part in field.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_match(reqs, obj):
    for field, op, val in reqs:
        v = field_value(obj, field)
        if (op == "=") != (v == val):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# patchMergeKey of the lists that have one (core/v1 types), for strategic merge patch.
SMP_MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name",
                  "volumeMounts": "mountPath", "env": "name", "ports": "containerPort",
                  "conditions": "type", "containerStatuses": "name",
                  "initContainerStatuses": "name", "tolerations": None, "imagePullSecrets": "name",
                  "ownerReferences": "uid", "podIPs": "ip", "hostIPs": "ip"}
SMP_PRIMITIVE_MERGE = {"finalizers"}


def strategic_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if patch.get("$patch") == "delete":
        return None
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k.startswith("$retainKeys") or k == "$patch":
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            if isinstance(result.get(name), list) and isinstance(v, list):
                result[name] = [x for x in result[name] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and k in SMP_PRIMITIVE_MERGE and isinstance(result.get(k), list):
            merged = list(result[k])
            for x in v:
                if x not in merged:
                    merged.append(x)
            result[k] = merged
        elif isinstance(v, list) and SMP_MERGE_KEYS.get(k) and isinstance(result.get(k), list):
            key = SMP_MERGE_KEYS[k]
            merged = copy.deepcopy(result[k])
            for item in v:
                if not isinstance(item, dict) or key not in item:
                    merged = copy.deepcopy(v)
                    break
                idx = next((i for i, e in enumerate(merged)
                            if isinstance(e, dict) and e.get(key) == item[key]), None)
                if item.get("$patch") == "delete":
                    if idx is not None:
                        merged.pop(idx)
                elif idx is None:
                    merged.append({a: b for a, b in item.items() if not a.startswith("$")})
                else:
                    merged[idx] = strategic_merge_patch(merged[idx], item)
            result[k] = merged
        elif isinstance(v, dict):
            r = strategic_merge_patch(result.get(k), v)
            if r is None:
                result.pop(k, None)
            else:
                result[k] = r
        else:
            result[k] = copy.deepcopy(v)
    return result


def _json_pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")

    def parent(d, parts):
        for p in parts[:-1]:
            d = d[int(p)] if isinstance(d, list) else d[p]
        return d

    def get(d, parts):
        for p in parts:
            d = d[int(p)] if isinstance(d, list) else d[p]
        return d

    for op in ops:
        kind, parts = op.get("op"), _json_pointer(op.get("path", ""))
        try:
            if kind == "test":
                if get(doc, parts) != op.get("value"):
                    raise ValueError("testing value %s failed" % op.get("path"))
                continue
            if kind in ("move", "copy"):
                val = copy.deepcopy(get(doc, _json_pointer(op["from"])))
                if kind == "move":
                    fp = _json_pointer(op["from"])
                    pp = parent(doc, fp)
                    del pp[int(fp[-1]) if isinstance(pp, list) else fp[-1]]
                kind, op = "add", {"value": val}
            if kind == "add":
                if not parts:
                    doc = copy.deepcopy(op["value"])
                    continue
                pp = parent(doc, parts)
                if isinstance(pp, list):
                    pp.insert(len(pp) if parts[-1] == "-" else int(parts[-1]), copy.deepcopy(op["value"]))
                else:
                    pp[parts[-1]] = copy.deepcopy(op["value"])
            elif kind == "remove":
                pp = parent(doc, parts)
                del pp[int(parts[-1]) if isinstance(pp, list) else parts[-1]]
            elif kind == "replace":
                if not parts:
                    doc = copy.deepcopy(op["value"])
                    continue
                pp = parent(doc, parts)
                idx = int(parts[-1]) if isinstance(pp, list) else parts[-1]
                if not isinstance(pp, list) and idx not in pp:
                    raise ValueError("replace operation does not apply: doc is missing key: %s"
                                     % op.get("path"))
                pp[idx] = copy.deepcopy(op["value"])
            else:
                raise ValueError("Unexpected kind: %s" % kind)
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError("%s operation does not apply: doc is missing path: %s (%s)"
                             % (kind, op.get("path"), e))
    return doc


# --------------------------------------------------------------------------------------------
# Defaults and validation
# --------------------------------------------------------------------------------------------

def _validate_meta(kind, meta, errs):
    name = meta.get("name", "")
    if name:
        if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
            errs.append(invalid_value("metadata.name", name, SUBDOMAIN_MSG))
    for k, v in (meta.get("labels") or {}).items():
        if not _qualified_key(k):
            errs.append(invalid_value("metadata.labels", k, "name part must consist of alphanumeric "
                                      "characters, '-', '_' or '.', and must start and end with "
                                      "an alphanumeric character"))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errs.append(invalid_value("metadata.labels", v, "a valid label must be an empty string "
                                      "or consist of alphanumeric characters, '-', '_' or '.', "
                                      "and must start and end with an alphanumeric character"))
    ann = meta.get("annotations") or {}
    for k, v in ann.items():
        if not _qualified_key(k):
            errs.append(invalid_value("metadata.annotations", k, "name part must consist of "
                                      "alphanumeric characters, '-', '_' or '.', and must start "
                                      "and end with an alphanumeric character"))
        if not isinstance(v, str):
            errs.append(invalid_value("metadata.annotations", v, "must be a string"))
    if sum(len(k) + len(v) for k, v in ann.items() if isinstance(v, str)) > 256 * 1024:
        errs.append(("metadata.annotations", "FieldValueTooLong",
                     "Too long: must have at most 262144 bytes"))


def _qualified_key(k):
    if not isinstance(k, str) or not k:
        return False
    if "/" in k:
        prefix, name = k.split("/", 1)
        if not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            return False
    else:
        name = k
    return len(name) <= 63 and bool(QUALIFIED_NAME.match(name))


def _check_resources(res, path, errs):
    parsed = {}
    for section in ("limits", "requests"):
        for rname, q in ((res or {}).get(section) or {}).items():
            try:
                v, _ = parse_quantity(q)
                if v < 0:
                    errs.append(invalid_value("%s.%s[%s]" % (path, section, rname), q,
                                              "must be greater than or equal to 0"))
                parsed[(section, rname)] = v
                res[section][rname] = canonical_quantity(q)
            except ValueError as e:
                errs.append(invalid_value("%s.%s[%s]" % (path, section, rname), q, str(e)))
    for (section, rname), v in parsed.items():
        if section == "requests" and ("limits", rname) in parsed and v > parsed[("limits", rname)]:
            errs.append(invalid_value("%s.requests" % path, (res["requests"][rname]),
                                      "must be less than or equal to %s limit of %s"
                                      % (rname, res["limits"][rname])))


def default_and_validate_pod(pod, errs):
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        errs.append(invalid_value("spec", spec, "must be an object"))
        return
    containers = spec.get("containers")
    if not containers:
        errs.append(required("spec.containers"))
        containers = []
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for i, v in enumerate(spec.get("volumes") or []):
        if not v.get("name"):
            errs.append(required("spec.volumes[%d].name" % i))
        elif not DNS1123_LABEL.match(v["name"]):
            errs.append(invalid_value("spec.volumes[%d].name" % i, v["name"], LABEL_MSG))
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None and not pvc.get("claimName"):
            errs.append(required("spec.volumes[%d].persistentVolumeClaim.claimName" % i))
    seen = set()
    for i, c in enumerate(containers):
        p = "spec.containers[%d]" % i
        if not isinstance(c, dict):
            errs.append(invalid_value(p, c, "must be an object"))
            continue
        if not c.get("name"):
            errs.append(required(p + ".name"))
        elif not DNS1123_LABEL.match(c["name"]):
            errs.append(invalid_value(p + ".name", c["name"], LABEL_MSG))
        elif c["name"] in seen:
            errs.append((p + ".name", "FieldValueDuplicate", 'Duplicate value: "%s"' % c["name"]))
        seen.add(c.get("name"))
        if not c.get("image"):
            errs.append(required(p + ".image"))
        for j, vm in enumerate(c.get("volumeMounts") or []):
            if not vm.get("name"):
                errs.append(required("%s.volumeMounts[%d].name" % (p, j)))
            elif vm["name"] not in volumes:
                errs.append(("%s.volumeMounts[%d].name" % (p, j), "FieldValueNotFound",
                             'Not found: "%s"' % vm["name"]))
            if not vm.get("mountPath"):
                errs.append(required("%s.volumeMounts[%d].mountPath" % (p, j)))
        res = c.setdefault("resources", {})
        _check_resources(res, p + ".resources", errs)
        # requests default to limits
        for rname, q in (res.get("limits") or {}).items():
            res.setdefault("requests", {}).setdefault(rname, q)
        image = c.get("image") or ""
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        c.setdefault("imagePullPolicy", "IfNotPresent" if tagged and not image.endswith(":latest")
                     else "Always")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
    rp = spec.setdefault("restartPolicy", "Always")
    if rp not in ("Always", "OnFailure", "Never"):
        errs.append(unsupported_value("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"]))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or isinstance(ads, bool) or ads <= 0):
        errs.append(invalid_value("spec.activeDeadlineSeconds", ads,
                                  "must be between 1 and 2147483647, inclusive"))
    tg = spec.setdefault("terminationGracePeriodSeconds", 30)
    if not isinstance(tg, int) or isinstance(tg, bool) or tg < 0:
        errs.append(invalid_value("spec.terminationGracePeriodSeconds", tg,
                                  "must be greater than or equal to 0"))
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("tolerations", [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300}])


def qos_class(pod):
    cs = (pod.get("spec") or {}).get("containers") or []
    any_set, guaranteed = False, True
    for c in cs:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, res.get("requests") or {}
        if lim or req:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_and_validate_pvc(pvc, errs):
    spec = pvc.setdefault("spec", {})
    if not isinstance(spec, dict):
        errs.append(invalid_value("spec", spec, "must be an object"))
        return
    modes = spec.get("accessModes")
    if not modes:
        errs.append(required("spec.accessModes", "at least 1 access mode is required"))
    allowed = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
    for m in modes or []:
        if m not in allowed:
            errs.append(unsupported_value("spec.accessModes", m, allowed))
    res = spec.setdefault("resources", {})
    storage = (res.get("requests") or {}).get("storage")
    if storage is None:
        errs.append(required("spec.resources[storage]"))
    else:
        try:
            v, _ = parse_quantity(storage)
            if v <= 0:
                errs.append(invalid_value("spec.resources[storage]", storage,
                                          "must be greater than zero"))
            res["requests"]["storage"] = canonical_quantity(storage)
        except ValueError as e:
            errs.append(invalid_value("spec.resources[storage]", storage, str(e)))
    spec.setdefault("volumeMode", "Filesystem")


# pod spec fields an update may change (ValidatePodUpdate)
POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates")


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------

META_ORDER = ("name", "generateName", "namespace", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
              "annotations", "ownerReferences", "finalizers", "managedFields")


def _order_meta(md):
    """metadata keys in the order the Go serializer writes them."""
    out = {k: md[k] for k in META_ORDER if k in md}
    out.update({k: v for k, v in md.items() if k not in out})
    return out


class Event:
    __slots__ = ("rv", "resource", "type", "obj", "prev")

    def __init__(self, rv, resource, type_, obj, prev):
        self.rv, self.resource, self.type, self.obj, self.prev = rv, resource, type_, obj, prev


class Store:
    """All objects, the global resourceVersion and the event history, under one lock.

    Committed objects are never mutated (every write stores a new dict), so they can be
    serialized outside the lock."""

    def __init__(self, history_limit=1000, default_storage_class=None, pvc_protection=False,
                 first_rv=1000):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.objects = {r: {} for r in RESOURCES}
        self.rv = first_rv
        self.history = collections.deque()
        self.compacted_rv = first_rv  # events with rv > compacted_rv are all in history
        self.history_limit = history_limit
        self.default_storage_class = default_storage_class
        self.pvc_protection = pvc_protection
        self.stopping = False

    # ---- persistence (CLI restart) ----
    def dump(self):
        with self.lock:
            return {"rv": self.rv, "objects": {r: list(objs.values()) for r, objs in self.objects.items()}}

    def load(self, data):
        with self.lock:
            self.rv = int(data["rv"])
            self.compacted_rv = self.rv
            self.history.clear()
            for r, items in data["objects"].items():
                self.objects[r] = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items}

    # ---- commit ----
    def _commit(self, resource, key, obj, etype, prev):
        self.rv += 1
        if obj is not None:
            obj["metadata"]["resourceVersion"] = str(self.rv)
            obj["metadata"] = _order_meta(obj["metadata"])
        if etype == "DELETED":
            self.objects[resource].pop(key, None)
            evobj = copy.deepcopy(prev)
            evobj["metadata"]["resourceVersion"] = str(self.rv)
        else:
            self.objects[resource][key] = obj
            evobj = obj
        self.history.append(Event(self.rv, resource, etype, evobj, prev))
        while len(self.history) > self.history_limit:
            ev = self.history.popleft()
            self.compacted_rv = ev.rv
        self.cond.notify_all()
        return evobj

    def compact(self, rv=None):
        """Forget the history up to rv (default: everything)."""
        with self.lock:
            rv = self.rv if rv is None else min(int(rv), self.rv)
            while self.history and self.history[0].rv <= rv:
                self.history.popleft()
            self.compacted_rv = max(self.compacted_rv, rv)
            self.cond.notify_all()

    # ---- helpers ----
    def _get(self, resource, ns, name):
        obj = self.objects[resource].get((ns, name))
        if obj is None:
            raise not_found(resource, name)
        return obj

    def _decode(self, resource, body):
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized (must be of type %s)"
                              % RESOURCES[resource]["kind"])
        kind = RESOURCES[resource]["kind"]
        if body.get("kind") not in (None, "", kind) or body.get("apiVersion") not in (None, "", "v1"):
            raise bad_request("the API version in the data (%s) does not match the expected API "
                              "version (v1)" % body.get("apiVersion")
                              if body.get("apiVersion") not in (None, "", "v1") else
                              "Object kind %s does not match %s" % (body.get("kind"), kind))
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        return body

    def _manager(self, user_agent, op, subresource=None):
        entry = {"manager": (user_agent or "unknown").split("/")[0] or "unknown", "operation": op,
                 "apiVersion": "v1", "time": now_rfc3339(), "fieldsType": "FieldsV1", "fieldsV1": {}}
        if subresource:
            entry["subresource"] = subresource
        return entry

    # ---- create ----
    def create(self, resource, ns, body, user_agent=None, dry_run=False):
        with self.lock:
            body = copy.deepcopy(self._decode(resource, body))
            kind = RESOURCES[resource]["kind"]
            meta = body.setdefault("metadata", {})
            if meta.get("namespace") not in (None, "", ns):
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            name = meta.get("name") or ""
            if not name and meta.get("generateName"):
                for _ in range(20):
                    name = meta["generateName"] + "".join(random.choice(GENERATE_CHARS) for _ in range(5))
                    if (ns, name) not in self.objects[resource]:
                        break
            errs = []
            if not name:
                errs.append(required("metadata.name", "name or generateName is required"))
            meta["name"] = name
            meta["namespace"] = ns
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "selfLink"):
                meta.pop(k, None)
            _validate_meta(kind, meta, errs)
            if resource == "pods":
                default_and_validate_pod(body, errs)
                status = {"phase": "Pending", "qosClass": qos_class(body)}
            elif resource == "configmaps":
                status = None
            else:
                spec = body.get("spec")
                if isinstance(spec, dict) and "storageClassName" not in spec and self.default_storage_class:
                    spec["storageClassName"] = self.default_storage_class
                default_and_validate_pvc(body, errs)
                status = {"phase": "Pending"}
                if self.pvc_protection:
                    fin = meta.setdefault("finalizers", [])
                    if "kubernetes.io/pvc-protection" not in fin:
                        fin.append("kubernetes.io/pvc-protection")
            if errs:
                raise invalid(kind, name, errs)
            if (ns, name) in self.objects[resource]:
                raise already_exists(resource, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if resource == "pods":
                meta["generation"] = 1
            meta["managedFields"] = [self._manager(user_agent, "Update")]
            body["apiVersion"] = "v1"
            body["kind"] = kind
            body["status"] = status
            out = {"kind": kind, "apiVersion": "v1", "metadata": meta, "spec": body.get("spec"),
                   "status": status}
            if resource == "configmaps":
                out = {"kind": kind, "apiVersion": "v1", "metadata": meta,
                       "data": body.get("data") or {}}
            if dry_run:
                return copy.deepcopy(out)
            return self._commit(resource, (ns, name), out, "ADDED", None)

    # ---- update (PUT and the result of PATCH) ----
    def _prepare_update(self, resource, ns, name, new, old, subresource, user_agent):
        kind = RESOURCES[resource]["kind"]
        new = copy.deepcopy(self._decode(resource, new))
        meta = new.setdefault("metadata", {})
        if meta.get("name") not in (None, "", name):
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (meta.get("name"), name))
        if meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace "
                              "sent on the request")
        if meta.get("uid") not in (None, "", old["metadata"]["uid"]):
            raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in "
                           "object meta: %s" % (meta.get("uid"), old["metadata"]["uid"]))
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and str(rv) != old["metadata"]["resourceVersion"]:
            raise conflict(resource, name, MODIFIED_MSG)
        out = copy.deepcopy(old)
        if subresource == "status":
            # the status subresource changes status only (and never spec or metadata)
            out["status"] = new.get("status") or {}
            if resource == "pods":
                out["status"].setdefault("qosClass", old["status"].get("qosClass"))
        else:
            errs = []
            omd = out["metadata"]
            for k in ("labels", "annotations", "finalizers", "ownerReferences"):
                if k in meta and meta[k] not in (None, [], {}):
                    omd[k] = meta[k]
                else:
                    omd.pop(k, None)
            _validate_meta(kind, omd, errs)
            newspec = new.get("spec")
            if newspec is None:
                newspec = {}
            if resource == "pods":
                tmp = {"spec": copy.deepcopy(newspec)}
                default_and_validate_pod(tmp, errs)
                oldspec = old["spec"]
                diff = [k for k in set(oldspec) | set(tmp["spec"])
                        if k not in POD_MUTABLE_SPEC and oldspec.get(k) != tmp["spec"].get(k)]
                # the image of a container may change
                if diff == ["containers"] and len(oldspec["containers"]) == len(tmp["spec"]["containers"]):
                    if all({**a, "image": None} == {**b, "image": None}
                           for a, b in zip(oldspec["containers"], tmp["spec"]["containers"])):
                        diff = []
                if diff:
                    errs.append(forbidden("spec", "pod updates may not change fields other than "
                                          "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                                          "`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                                          "additions to existing tolerations),"
                                          "`spec.terminationGracePeriodSeconds` (allow it to be set "
                                          "to 1 if it was previously negative)"))
                oads = oldspec.get("activeDeadlineSeconds")
                nads = tmp["spec"].get("activeDeadlineSeconds")
                if oads is not None and (nads is None or nads > oads):
                    errs.append(invalid_value("spec.activeDeadlineSeconds", nads,
                                              "must be less than or equal to previous value"))
                if not errs:
                    if tmp["spec"] != oldspec:
                        omd["generation"] = omd.get("generation", 1) + 1
                    out["spec"] = tmp["spec"]
            else:
                tmp = {"spec": copy.deepcopy(newspec)}
                default_and_validate_pvc(tmp, errs)
                oldspec = old["spec"]
                for k in set(oldspec) | set(tmp["spec"]):
                    if oldspec.get(k) == tmp["spec"].get(k):
                        continue
                    if k == "volumeName" and not oldspec.get("volumeName"):
                        continue
                    if k == "resources" and old["status"].get("phase") == "Bound":
                        continue
                    errs.append(forbidden("spec", "spec is immutable after creation except "
                                          "resources.requests and volumeAttributesClassName for "
                                          "bound claims"))
                    break
                if not errs:
                    out["spec"] = tmp["spec"]
            if errs:
                raise invalid(kind, name, errs)
        return out

    def _store_update(self, resource, ns, name, out, old, user_agent, subresource):
        if out == old:
            return old  # no-op: the resourceVersion does not move, no event
        out["metadata"]["managedFields"] = (old["metadata"].get("managedFields") or [])[:0] + [
            self._manager(user_agent, "Update", subresource)]
        md = out["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and \
                (md.get("deletionGracePeriodSeconds") or 0) == 0:
            # the last finalizer went: the object goes
            return self._commit(resource, (ns, name), None, "DELETED", out)
        return self._commit(resource, (ns, name), out, "MODIFIED", old)

    def update(self, resource, ns, name, body, subresource=None, user_agent=None, dry_run=False):
        with self.lock:
            old = self._get(resource, ns, name)
            out = self._prepare_update(resource, ns, name, body, old, subresource, user_agent)
            if dry_run:
                return out
            return self._store_update(resource, ns, name, out, old, user_agent, subresource)

    def patch(self, resource, ns, name, patch, ctype, subresource=None, user_agent=None,
              dry_run=False):
        with self.lock:
            old = self._get(resource, ns, name)
            try:
                if ctype == "application/merge-patch+json":
                    if not isinstance(patch, dict):
                        raise ValueError("a merge patch must be a JSON object")
                    new = merge_patch(old, patch)
                elif ctype == "application/strategic-merge-patch+json":
                    if not isinstance(patch, dict):
                        raise ValueError("a strategic merge patch must be a JSON object")
                    new = strategic_merge_patch(old, patch)
                elif ctype == "application/json-patch+json":
                    new = json_patch(old, patch)
                else:
                    raise ApiError(415, "UnsupportedMediaType",
                                   "the body of the request was in an unknown format - accepted "
                                   "media types include: application/json-patch+json, "
                                   "application/merge-patch+json, "
                                   "application/apply-patch+yaml")
            except ValueError as e:
                raise ApiError(422 if ctype == "application/json-patch+json" else 400,
                               "Invalid" if ctype == "application/json-patch+json" else "BadRequest",
                               str(e))
            if not isinstance(new, dict):
                raise bad_request("the patch produced a value that is not an object")
            pmeta = patch.get("metadata") if isinstance(patch, dict) else None
            if not (isinstance(pmeta, dict) and pmeta.get("resourceVersion")):
                # without a resourceVersion in the patch, the update is unconditional
                new.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
            out = self._prepare_update(resource, ns, name, new, old, subresource, user_agent)
            if dry_run:
                return out
            return self._store_update(resource, ns, name, out, old, user_agent, subresource)

    # ---- binding ----
    def bind(self, ns, name, body, user_agent=None):
        with self.lock:
            if not isinstance(body, dict) or body.get("kind") not in (None, "Binding"):
                raise bad_request("the object provided is unrecognized (must be of type Binding)")
            bmeta = body.get("metadata") or {}
            if bmeta.get("name") not in (None, "", name):
                raise bad_request("the name of the object (%s) does not match the name on the URL "
                                  "(%s)" % (bmeta.get("name"), name))
            target = (body.get("target") or {}).get("name")
            if not target:
                raise invalid("Binding", name, [required("target.name")])
            old = self._get("pods", ns, name)
            md = old["metadata"]
            if bmeta.get("uid") and bmeta["uid"] != md["uid"]:
                raise conflict("pods", name, "Precondition failed: UID in precondition: %s, UID in "
                               "object meta: %s" % (bmeta["uid"], md["uid"]))
            if md.get("deletionTimestamp"):
                raise conflict("pods", name, "pod %s is being deleted, cannot be assigned to a host"
                               % name)
            if old["spec"].get("nodeName"):
                raise conflict("pods", name, 'pod %s is already assigned to node "%s"'
                               % (name, old["spec"]["nodeName"]))
            out = copy.deepcopy(old)
            out["spec"]["nodeName"] = target
            conds = [c for c in out["status"].get("conditions") or [] if c.get("type") != "PodScheduled"]
            conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": now_rfc3339()})
            out["status"]["conditions"] = conds
            self._store_update("pods", ns, name, out, old, user_agent, "binding")
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}

    # ---- delete ----
    def delete(self, resource, ns, name, options=None, user_agent=None, dry_run=False):
        """Returns (code, body)."""
        options = options or {}
        with self.lock:
            old = self._get(resource, ns, name)
            md = old["metadata"]
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != md["uid"]:
                raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in "
                               "object meta: %s" % (pre["uid"], md["uid"]))
            if pre.get("resourceVersion") and str(pre["resourceVersion"]) != md["resourceVersion"]:
                raise conflict(resource, name, "Precondition failed: ResourceVersion in precondition: "
                               "%s, ResourceVersion in meta: %s" % (pre["resourceVersion"],
                                                                  md["resourceVersion"]))
            grace = options.get("gracePeriodSeconds")
            if grace is not None:
                try:
                    grace = int(grace)
                except (TypeError, ValueError):
                    raise bad_request("gracePeriodSeconds must be an integer")
            graceful = False
            if resource == "pods":
                if grace is None:
                    grace = old["spec"].get("terminationGracePeriodSeconds", 30)
                if grace < 0:
                    grace = 1
                if not old["spec"].get("nodeName") or old["status"].get("phase") in ("Failed", "Succeeded"):
                    grace = 0
                graceful = True
            else:
                grace = 0
            if md.get("deletionTimestamp"):
                # already being deleted: the grace period can only be shortened
                cur = md.get("deletionGracePeriodSeconds")
                if cur is None or cur == 0:
                    if md.get("finalizers"):
                        return 200, old
                    return self._delete_now(resource, ns, name, old, dry_run)
                if options.get("gracePeriodSeconds") is None or grace >= cur:
                    return 200, old
                out = copy.deepcopy(old)
                start = parse_rfc3339(md["deletionTimestamp"]) - cur
                out["metadata"]["deletionTimestamp"] = now_rfc3339(start + grace)
                out["metadata"]["deletionGracePeriodSeconds"] = grace
                if grace == 0 and not md.get("finalizers"):
                    return self._delete_now(resource, ns, name, old, dry_run)
                if dry_run:
                    return 200, out
                return 200, self._commit(resource, (ns, name), out, "MODIFIED", old)
            if (graceful and grace > 0) or md.get("finalizers"):
                out = copy.deepcopy(old)
                out["metadata"]["deletionTimestamp"] = now_rfc3339(time.time() + grace)
                out["metadata"]["deletionGracePeriodSeconds"] = grace
                if "generation" in out["metadata"]:
                    out["metadata"]["generation"] += 1
                if dry_run:
                    return 200, out
                return 200, self._commit(resource, (ns, name), out, "MODIFIED", old)
            return self._delete_now(resource, ns, name, old, dry_run)

    def _delete_now(self, resource, ns, name, old, dry_run):
        if dry_run:
            return 200, old
        # pods and PVCs are stores with ReturnDeletedObject: the body is the deleted object
        self._commit(resource, (ns, name), None, "DELETED", old)
        return 200, old

    # ---- reads ----
    def snapshot(self, resource, at_rv=None):
        """Objects of resource as of at_rv (None: now). Raises 410 if at_rv is compacted."""
        objs = dict(self.objects[resource])
        if at_rv is None or at_rv >= self.rv:
            return objs
        if at_rv < self.compacted_rv:
            raise expired("The provided continue parameter is too old to display a consistent list "
                          "result. You can start a new list without the continue parameter, or use "
                          "the continue token in this response to retrieve the remainder of the "
                          "results. Continuing with the provided token results in an inconsistent "
                          "list - objects that were created, modified, or deleted between the time "
                          "the first chunk was returned and now may show up in the list.")
        for ev in reversed(self.history):
            if ev.rv <= at_rv:
                break
            if ev.resource != resource:
                continue
            md = (ev.prev or ev.obj)["metadata"]
            key = (md["namespace"], md["name"])
            if ev.type == "ADDED":
                objs.pop(key, None)
            else:
                objs[key] = ev.prev
        return objs

    def list(self, resource, ns=None, label_sel="", field_sel="", limit=0, cont=None,
             rv=None, rv_match=None):
        lreq = parse_label_selector(label_sel)
        freq = parse_field_selector(field_sel, resource)
        with self.lock:
            at_rv, start = None, None
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont + "=" * (-len(cont) % 4)))
                    at_rv, start = int(tok["rv"]), tok["start"]
                except Exception:
                    raise bad_request("continue key is not valid: the continue token is malformed")
                if rv not in (None, "", "0") and rv is not None:
                    raise bad_request("specifying resource version is not allowed when using continue")
            elif rv_match == "Exact" and rv not in (None, ""):
                at_rv = int(rv)
                if at_rv < self.compacted_rv:
                    raise expired("too old resource version: %d (%d)" % (at_rv, self.compacted_rv))
            list_rv = at_rv if at_rv is not None else self.rv
            objs = self.snapshot(resource, at_rv)
        keys = sorted(k for k in objs if ns is None or k[0] == ns)
        if start is not None:
            keys = [k for k in keys if "%s/%s" % k > start]
        items, next_key = [], None
        matched = [k for k in keys if label_match(lreq, objs[k]["metadata"].get("labels"))
                   and field_match(freq, objs[k])]
        for k in matched:
            if limit and len(items) >= limit:
                next_key = "%s/%s" % items[-1][0]
                break
            items.append((k, objs[k]))
        meta = {"resourceVersion": str(list_rv)}
        if next_key is not None:
            tok = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": next_key},
                             separators=(",", ":"))
            meta["continue"] = base64.urlsafe_b64encode(tok.encode()).decode().rstrip("=")
            if not lreq and not freq:
                meta["remainingItemCount"] = len(matched) - len(items)
        return {"kind": RESOURCES[resource]["list_kind"], "apiVersion": "v1", "metadata": meta,
                "items": [o for _, o in items]}


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

class FaultRule:
    def __init__(self, action, status=500, count=None, until=None, method=None, path=None,
                 retry_after=1, seconds=0.0, message="injected fault"):
        self.action = action            # "fail" or "latency"
        self.status = int(status)
        self.count = count              # None = unlimited (bounded by until)
        self.until = until              # None = no time bound
        self.method = method.upper() if method else None
        self.path = re.compile(path) if path else None
        self.retry_after = retry_after
        self.seconds = float(seconds)
        self.message = message

    def describe(self):
        return {"action": self.action, "status": self.status, "count": self.count,
                "remaining_seconds": None if self.until is None else max(0, self.until - time.time()),
                "method": self.method, "path": self.path.pattern if self.path else None,
                "retry_after": self.retry_after, "seconds": self.seconds}

    def alive(self):
        return (self.count is None or self.count > 0) and (self.until is None or time.time() < self.until)

    def matches(self, method, target):
        return (self.method is None or self.method == method) and \
            (self.path is None or self.path.search(target) is not None)


def fault_error(rule):
    if rule.status == 429:
        return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                        {"retryAfterSeconds": int(rule.retry_after)},
                        {"Retry-After": str(int(rule.retry_after))})
    if rule.status == 503:
        return ApiError(503, "ServiceUnavailable", "The server is currently unable to handle the "
                        "request (%s)" % rule.message, {"retryAfterSeconds": int(rule.retry_after)},
                        {"Retry-After": str(int(rule.retry_after))})
    if rule.status == 504:
        return ApiError(504, "Timeout", "Timeout: request did not complete within requested timeout "
                        "- context deadline exceeded", {})
    if rule.status == 410:
        return expired("too old resource version: 1 (%s)" % rule.message)
    return ApiError(rule.status, "InternalError", "Internal error occurred: %s" % rule.message,
                    {"causes": [{"message": rule.message}]})


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------

class _ClientGone(Exception):
    pass


class _StreamEnd(Exception):
    pass


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-test"
    sys_version = ""
    timeout = 300

    def setup(self):
        # The headers and the body go out in two writes: without this, Nagle holds the body
        # until the client's delayed ACK (40 ms a request), as Go's net/http never does.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(30)
        self.request = self.server.api.ssl_ctx.wrap_socket(self.request, server_side=True)
        self.request.settimeout(self.timeout)
        super().setup()
        self.server.api._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        self.server.api._track(self.connection, False)
        try:
            self.connection.close()
        except OSError:
            pass

    def log_message(self, fmt, *args):
        if self.server.api.verbose:
            sys.stderr.write("apiserver: " + (fmt % args) + "\n")

    # ---- plumbing ----
    def _send_json(self, code, body, headers=None):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._code = code

    def _send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._code = code

    def _read_body(self):
        self._body_read = True
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
                if sum(len(c) for c in chunks) > 3 * 1024 * 1024:
                    raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        if n > 3 * 1024 * 1024:
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
        return self.rfile.read(n) if n else b""

    def _json_body(self, allow_empty=False):
        raw = self._read_body()
        if not raw.strip():
            if allow_empty:
                return None
            raise bad_request("the body of the request is empty")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise bad_request("the object provided is unrecognized: json parse error: %s" % e)

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method):
        api = self.server.api
        self._code = 0
        self._body_read = False  # per request: a keep-alive connection reuses this handler
        t0 = time.monotonic()
        target = self.path
        url = urllib.parse.urlsplit(target)
        path = url.path
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        ua = self.headers.get("User-Agent", "")
        try:
            try:
                public = path in ("/healthz", "/livez", "/readyz", "/version")
                if not public and not api._authorized(self.headers.get("Authorization")):
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                if path.startswith("/_test/"):
                    return self._test_endpoint(method, path)
                delay = api._faults_for(method, target)
                if delay:
                    time.sleep(delay)
                self._route(method, path, q, ua)
            except ApiError:
                raise
            except (_ClientGone, ConnectionError, ssl.SSLError, socket.timeout):
                self.close_connection = True
            except ValueError as e:
                raise bad_request(str(e))
        except ApiError as e:
            # a body the client sent but we did not read would desync the connection
            self._drain()
            try:
                self._send_json(e.code, e.status(), e.headers)
            except OSError:
                self.close_connection = True
        except Exception as e:  # a bug here must still give the client a proper 500
            import traceback
            traceback.print_exc()
            try:
                self._send_json(500, ApiError(500, "InternalError", "Internal error occurred: %s" % e,
                                              {"causes": [{"message": str(e)}]}).status())
            except OSError:
                self.close_connection = True
        finally:
            api._log_request(method, target, self._code, ua, time.monotonic() - t0)

    def _drain(self):
        if getattr(self, "_body_read", False):
            return
        try:
            if method_has_body(self.command):
                self._read_body()
        except Exception:
            self.close_connection = True
        self._body_read = True

    def _route(self, method, path, q, ua):
        api = self.server.api
        store = api.store
        self._body_read = False
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz"):
            if method not in ("GET", "HEAD"):
                raise method_not_allowed()
            return self._send_text(200, "ok")
        if path == "/version":
            return self._send_json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0",
                                         "gitCommit": "test", "gitTreeState": "clean",
                                         "buildDate": "2024-04-17T17:27:03Z",
                                         "goVersion": "go1.22.2", "compiler": "gc",
                                         "platform": "linux/amd64"})
        if parts == ["api"]:
            return self._send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                         "serverAddressByClientCIDRs": [
                                             {"clientCIDR": "0.0.0.0/0",
                                              "serverAddress": "%s:%d" % (api.host, api.port)}]})
        if parts == ["apis"]:
            return self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if parts == ["api", "v1"]:
            return self._send_json(200, api_resource_list())
        if len(parts) < 3 or parts[:2] != ["api", "v1"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        rest = parts[2:]
        watch_path = False
        if rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        ns = None
        if rest and rest[0] == "namespaces":
            if len(rest) == 1:
                return self._namespaces(method, None, q)
            ns = rest[1]
            rest = rest[2:]
            if not rest:
                return self._namespaces(method, ns, q)
        if not rest or rest[0] not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub and sub not in RESOURCES[resource]["subresources"]):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        watch = watch_path or q.get("watch", "") in ("1", "true", "True")
        dry_run = q.get("dryRun") == "All"
        if name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})

        if name is None:
            if method in ("GET", "HEAD"):
                if watch:
                    return self._watch(resource, ns, q)
                res = store.list(resource, ns, q.get("labelSelector"), q.get("fieldSelector"),
                                 int(q.get("limit") or 0), q.get("continue") or None,
                                 q.get("resourceVersion"), q.get("resourceVersionMatch"))
                return self._send_json(200, res)
            if method == "POST" and ns is not None:
                body = self._json_body()
                self._body_read = True
                obj = store.create(resource, ns, body, ua, dry_run)
                return self._send_json(201, obj)
            raise method_not_allowed()

        if method in ("GET", "HEAD"):
            if watch:
                fs = "metadata.name=%s" % name
                if q.get("fieldSelector"):
                    fs += "," + q["fieldSelector"]
                q = dict(q, fieldSelector=fs)
                return self._watch(resource, ns, q)
            with store.lock:
                obj = store._get(resource, ns, name)
            return self._send_json(200, obj)
        if sub == "binding":
            if method != "POST":
                raise method_not_allowed()
            body = self._json_body()
            self._body_read = True
            return self._send_json(201, store.bind(ns, name, body, ua))
        if method == "PUT":
            body = self._json_body()
            self._body_read = True
            return self._send_json(200, store.update(resource, ns, name, body, sub, ua, dry_run))
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            body = self._json_body()
            self._body_read = True
            return self._send_json(200, store.patch(resource, ns, name, body, ctype, sub, ua, dry_run))
        if method == "DELETE" and sub is None:
            opts = self._json_body(allow_empty=True) or {}
            self._body_read = True
            if not isinstance(opts, dict):
                raise bad_request("DeleteOptions must be an object")
            if q.get("gracePeriodSeconds") not in (None, ""):
                opts["gracePeriodSeconds"] = q["gracePeriodSeconds"]
            if q.get("propagationPolicy"):
                opts["propagationPolicy"] = q["propagationPolicy"]
            code, body = store.delete(resource, ns, name, opts, ua,
                                      dry_run or opts.get("dryRun") == ["All"])
            return self._send_json(code, body)
        raise method_not_allowed()

    def _namespaces(self, method, ns, q):
        if method not in ("GET", "HEAD"):
            raise method_not_allowed()
        store = self.server.api.store

        def ns_obj(n):
            return {"kind": "Namespace", "apiVersion": "v1",
                    "metadata": {"name": n, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, n)),
                                 "resourceVersion": "1", "creationTimestamp": now_rfc3339(0),
                                 "labels": {"kubernetes.io/metadata.name": n}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        if ns is not None:
            if not DNS1123_LABEL.match(ns):
                raise not_found("namespaces", ns)
            return self._send_json(200, ns_obj(ns))
        with store.lock:
            names = sorted({k[0] for objs in store.objects.values() for k in objs} |
                           {"default", "kube-system"})
            rv = store.rv
        return self._send_json(200, {"kind": "NamespaceList", "apiVersion": "v1",
                                     "metadata": {"resourceVersion": str(rv)},
                                     "items": [ns_obj(n) for n in names]})

    # ---- watch ----
    def _chunk(self, data):
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def _client_closed(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            self.connection.setblocking(False)
            try:
                data = self.connection.recv(1)
            finally:
                self.connection.setblocking(True)
                self.connection.settimeout(self.timeout)
            return data == b""
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True

    def _watch(self, resource, ns, q):
        api = self.server.api
        store = api.store
        lreq = parse_label_selector(q.get("labelSelector"))
        freq = parse_field_selector(q.get("fieldSelector"), resource)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        send_initial = q.get("sendInitialEvents") in ("1", "true", "True")
        timeout = q.get("timeoutSeconds")
        if timeout not in (None, ""):
            timeout = float(timeout)
        else:
            timeout = api.default_watch_timeout * (1 + random.random())
        deadline = time.time() + timeout
        rv_param = q.get("resourceVersion")
        if send_initial and q.get("resourceVersionMatch") != "NotOlderThan":
            raise invalid("ListOptions", "", [forbidden("resourceVersionMatch", "sendInitialEvents "
                                                        "requires setting resourceVersionMatch to "
                                                        "NotOlderThan")])
        kind = RESOURCES[resource]["kind"]

        def passes(obj):
            return obj is not None and (ns is None or obj["metadata"]["namespace"] == ns) and \
                label_match(lreq, obj["metadata"].get("labels")) and field_match(freq, obj)

        initial, error = [], None
        with store.lock:
            drop_gen = api.drop_gen
            if rv_param in (None, "", "0") or send_initial:
                pos = store.rv
                objs = store.objects[resource]
                initial = [objs[k] for k in sorted(objs) if passes(objs[k])]
            else:
                try:
                    pos = int(rv_param)
                except ValueError:
                    raise bad_request('invalid resource version: strconv.ParseUint: parsing "%s": '
                                      'invalid syntax' % rv_param)
                if pos < store.compacted_rv:
                    error = expired("too old resource version: %d (%d)" % (pos, store.compacted_rv + 1))
            api.watch_count += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._code = 200

        def emit(etype, obj):
            self._chunk(json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode()
                        + b"\n")

        def bookmark(rv, initial_end=False):
            meta = {"resourceVersion": str(rv), "creationTimestamp": None}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            obj = {"kind": kind, "apiVersion": "v1", "metadata": meta}
            obj.update(copy.deepcopy(BOOKMARK_BODY[resource]))
            emit("BOOKMARK", obj)

        clean = True
        try:
            if error is not None:
                emit("ERROR", error.status())
                raise _StreamEnd()
            for obj in initial:
                emit("ADDED", obj)
            if send_initial:
                bookmark(pos, True)
            last_bookmark = time.time()
            while True:
                with store.lock:
                    while True:
                        if api.drop_gen != drop_gen or store.stopping:
                            break
                        if store.rv > pos:
                            break
                        now = time.time()
                        wait = min(deadline - now, 1.0)
                        if bookmarks:
                            wait = min(wait, last_bookmark + api.bookmark_interval - now)
                        if wait <= 0:
                            break
                        store.cond.wait(wait)
                    if api.drop_gen != drop_gen or store.stopping:
                        clean = api.drop_clean and not store.stopping
                        break
                    if pos < store.compacted_rv:
                        error = expired("too old resource version: %d (%d)" % (pos, store.compacted_rv + 1))
                        events = []
                    else:
                        # the new events only, from the end (history is in rv order): a
                        # watch costs what it sends, not the history's length
                        events = []
                        for ev in reversed(store.history):
                            if ev.rv <= pos:
                                break
                            events.append(ev)
                        events.reverse()
                    cur_rv = store.rv
                if error is not None:
                    emit("ERROR", error.status())
                    raise _StreamEnd()
                for ev in events:
                    pos = ev.rv
                    if ev.resource != resource:
                        continue
                    now_p = ev.type != "DELETED" and passes(ev.obj)
                    old_p = passes(ev.prev)
                    if now_p and not old_p:
                        emit("ADDED", ev.obj)
                    elif now_p and old_p:
                        emit("MODIFIED", ev.obj)
                    elif old_p:
                        gone = copy.deepcopy(ev.prev) if ev.type != "DELETED" else ev.obj
                        gone["metadata"]["resourceVersion"] = str(ev.rv)
                        emit("DELETED", gone)
                pos = max(pos, cur_rv)
                now = time.time()
                if now >= deadline:
                    break
                if bookmarks and now >= last_bookmark + api.bookmark_interval:
                    bookmark(pos)
                    last_bookmark = now
                if self._client_closed():
                    raise _ClientGone()
        except _StreamEnd:
            pass
        except (OSError, _ClientGone, ssl.SSLError):
            self.close_connection = True
            return
        finally:
            with store.lock:
                api.watch_count -= 1
        if clean:
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True
        else:
            # dropped: close the connection without the terminating chunk
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---- test endpoint ----
    def _test_endpoint(self, method, path):
        api = self.server.api
        if path == "/_test/faults":
            if method == "GET":
                return self._send_json(200, {"faults": api.describe_faults(),
                                             "resourceVersion": str(api.store.rv),
                                             "watches": api.watch_count})
            if method != "POST":
                raise method_not_allowed()
            body = self._json_body()
            self._body_read = True
            res = api.apply_fault(body)
            return self._send_json(200, res or {"ok": True})
        if path == "/_test/requests" and method == "GET":
            return self._send_json(200, {"requests": list(api.request_log)})
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_has_body(m):
    return m in ("POST", "PUT", "PATCH", "DELETE")


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                    "requested resource", {})


def api_resource_list():
    verbs_all = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list"], "shortNames": ["ns"]},
        {"name": "persistentvolumeclaims", "singularName": "persistentvolumeclaim", "namespaced": True,
         "kind": "PersistentVolumeClaim", "verbs": verbs_all, "shortNames": ["pvc"]},
        {"name": "persistentvolumeclaims/status", "singularName": "", "namespaced": True,
         "kind": "PersistentVolumeClaim", "verbs": ["get", "patch", "update"]},
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": verbs_all,
         "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
         "verbs": ["create"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "patch", "update"]}]}


class _HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError, ConnectionError)):
            return
        super().handle_error(request, client_address)


# --------------------------------------------------------------------------------------------
# TLS material
# --------------------------------------------------------------------------------------------

def make_certs(state_dir):
    """CA + server certificate for 127.0.0.1/localhost (and the in-cluster names), with openssl."""
    ca_crt, ca_key = os.path.join(state_dir, "ca.crt"), os.path.join(state_dir, "ca.key")
    crt, key = os.path.join(state_dir, "server.crt"), os.path.join(state_dir, "server.key")
    if all(os.path.exists(p) for p in (ca_crt, ca_key, crt, key)):
        return ca_crt, crt, key

    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "3650",
        "-subj", "/CN=compute-test-kube-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
    csr = os.path.join(state_dir, "server.csr")
    run("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver")
    ext = os.path.join(state_dir, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                "DNS:kubernetes.default.svc.cluster.local\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
        "-out", crt, "-days", "3650", "-extfile", ext)
    os.chmod(key, 0o600)
    os.chmod(ca_key, 0o600)
    return ca_crt, crt, key


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------

class ApiServer:
    def __init__(self, state_dir, token=None, host="127.0.0.1", port=0, namespace="default",
                 history_limit=1000, bookmark_interval=5.0, default_watch_timeout=1800.0,
                 default_storage_class=None, pvc_protection=False, verbose=False):
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.token = token or secrets.token_hex(16)
        self.tokens = {self.token}
        self.host = host
        self.port = port
        self.namespace = namespace
        self.bookmark_interval = float(bookmark_interval)
        self.default_watch_timeout = float(default_watch_timeout)
        self.verbose = verbose
        self.store = Store(history_limit, default_storage_class, pvc_protection)
        self.faults = []
        self.faults_lock = threading.Lock()
        self.drop_gen = 0
        self.drop_clean = False
        self.watch_count = 0
        self.request_log = collections.deque(maxlen=20000)
        self.conns = set()
        self.conns_lock = threading.Lock()
        self.httpd = None
        self.thread = None
        self.ca_path, self.cert_path, self.key_path = make_certs(self.state_dir)
        self.ssl_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ssl_ctx.load_cert_chain(self.cert_path, self.key_path)
        self.ssl_ctx.set_alpn_protocols(["http/1.1"])
        self.kubeconfig_path = os.path.join(self.state_dir, "kubeconfig")

    # ---- lifecycle ----
    @property
    def url(self):
        return "https://%s:%d" % (self.host, self.port)

    def start(self):
        if self.httpd is not None:
            return self
        deadline = time.time() + 10
        while True:
            try:
                self.httpd = _HTTPServer((self.host, self.port), Handler)
                break
            except OSError:
                if self.port == 0 or time.time() > deadline:
                    raise
                time.sleep(0.1)
        self.httpd.api = self
        self.port = self.httpd.server_address[1]
        with self.store.lock:
            self.store.stopping = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True, name="apiserver")
        self.thread.start()
        self._write_files()
        return self

    def stop(self):
        """Stop serving (closing every connection); objects are kept for start()."""
        if self.httpd is None:
            return
        with self.store.lock:
            self.store.stopping = True
            self.store.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.conns_lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)
        self.httpd = None

    def restart(self, down_seconds=0.0):
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _write_files(self):
        with open(self.ca_path, "rb") as f:
            ca_b64 = base64.b64encode(f.read()).decode()
        cfg = ("apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n"
               "    server: %s\n    certificate-authority-data: %s\n"
               "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n"
               "    namespace: %s\ncurrent-context: test\npreferences: {}\n"
               "users:\n- name: test\n  user:\n    token: %s\n"
               % (self.url, ca_b64, self.namespace, self.token))
        for fname, data in (("token", self.token), ("namespace", self.namespace),
                            ("url", self.url + "\n"), ("kubeconfig", cfg)):
            tmp = os.path.join(self.state_dir, "." + fname + ".tmp")
            with open(tmp, "w") as f:
                f.write(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, os.path.join(self.state_dir, fname))

    def _track(self, conn, add):
        with self.conns_lock:
            if add:
                self.conns.add(conn)
            else:
                self.conns.discard(conn)

    def _authorized(self, header):
        if not header or not header.startswith("Bearer "):
            return False
        return header[7:].strip() in self.tokens

    def _log_request(self, method, target, code, ua, seconds=0.0):
        """seconds: the request's service time (a watch's: its whole stream)."""
        self.request_log.append({"time": time.time(), "method": method, "path": target,
                                 "code": code, "user_agent": ua, "seconds": seconds})

    # ---- tokens ----
    def add_token(self, token):
        self.tokens.add(token)

    def remove_token(self, token):
        self.tokens.discard(token)

    # ---- faults ----
    def _faults_for(self, method, target):
        """Raises the ApiError of a matching fail rule; returns the latency to add."""
        delay = 0.0
        with self.faults_lock:
            self.faults = [r for r in self.faults if r.alive()]
            for r in self.faults:
                if not r.matches(method, target):
                    continue
                if r.count is not None:
                    r.count -= 1
                if r.action == "latency":
                    delay += r.seconds
                else:
                    if delay:
                        time.sleep(delay)
                    raise fault_error(r)
        return delay

    def fail_next(self, count, status=500, method=None, path=None, retry_after=1, message="injected fault"):
        """Fail the next `count` requests (matching method and the path regex, if given)."""
        with self.faults_lock:
            self.faults.append(FaultRule("fail", status, count=count, method=method, path=path,
                                         retry_after=retry_after, message=message))

    def fail_for(self, seconds, status=500, method=None, path=None, retry_after=1, message="injected fault"):
        """Fail every matching request for `seconds`."""
        with self.faults_lock:
            self.faults.append(FaultRule("fail", status, until=time.time() + seconds, method=method,
                                         path=path, retry_after=retry_after, message=message))

    def add_latency(self, seconds, method=None, path=None, count=None, duration=None):
        with self.faults_lock:
            self.faults.append(FaultRule("latency", seconds=seconds, count=count, method=method,
                                         path=path, until=None if duration is None else time.time() + duration))

    def clear_faults(self):
        with self.faults_lock:
            self.faults = []

    def describe_faults(self):
        with self.faults_lock:
            return [r.describe() for r in self.faults if r.alive()]

    def drop_watches(self, clean=False):
        """End every open watch now: by closing its connection (default) or, with clean=True, with
        the terminating chunk as when timeoutSeconds expires."""
        with self.store.lock:
            self.drop_clean = clean
            self.drop_gen += 1
            self.store.cond.notify_all()

    def compact(self, rv=None):
        """Forget the event history up to rv (default: now): watches from older resourceVersions get
        410 Expired, and so do continue tokens."""
        self.store.compact(rv)

    def apply_fault(self, body):
        """The /_test/faults actions (also usable from the module)."""
        a = body.get("action")
        if a == "fail":
            if body.get("seconds") is not None:
                self.fail_for(float(body["seconds"]), body.get("status", 500), body.get("method"),
                              body.get("path"), body.get("retry_after", 1))
            else:
                self.fail_next(int(body.get("count", 1)), body.get("status", 500), body.get("method"),
                               body.get("path"), body.get("retry_after", 1))
        elif a == "latency":
            self.add_latency(float(body.get("seconds", 0.5)), body.get("method"), body.get("path"),
                             body.get("count"), body.get("duration"))
        elif a == "clear":
            self.clear_faults()
        elif a == "drop_watches":
            self.drop_watches(bool(body.get("clean", False)))
        elif a == "compact":
            self.compact(body.get("resourceVersion"))
        elif a == "restart":
            down = float(body.get("down_seconds", 0))
            threading.Timer(0.2, self.restart, args=(down,)).start()
        elif a == "set_bookmark_interval":
            self.bookmark_interval = float(body["seconds"])
        else:
            raise bad_request("unknown fault action %r" % a)
        return {"ok": True, "resourceVersion": str(self.store.rv)}

    # ---- direct object access for tests (same semantics as the REST API, events included) ----
    @property
    def resource_version(self):
        return self.store.rv

    def get(self, resource, namespace, name):
        with self.store.lock:
            obj = self.store.objects[resource].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource, namespace=None, label_selector="", field_selector=""):
        return copy.deepcopy(self.store.list(resource, namespace, label_selector, field_selector)["items"])

    def create(self, resource, namespace, obj):
        return copy.deepcopy(self.store.create(resource, namespace, obj, "test"))

    def update(self, resource, namespace, name, obj, subresource=None):
        return copy.deepcopy(self.store.update(resource, namespace, name, obj, subresource, "test"))

    def patch(self, resource, namespace, name, patch, subresource=None,
              content_type="application/merge-patch+json"):
        return copy.deepcopy(self.store.patch(resource, namespace, name, patch, content_type,
                                              subresource, "test"))

    def patch_status(self, resource, namespace, name, status):
        return self.patch(resource, namespace, name, {"status": status}, "status")

    def delete(self, resource, namespace, name, grace_period_seconds=None, uid=None,
               resource_version=None):
        opts = {}
        if grace_period_seconds is not None:
            opts["gracePeriodSeconds"] = grace_period_seconds
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            opts["preconditions"] = pre
        return copy.deepcopy(self.store.delete(resource, namespace, name, opts, "test")[1])

    def wait_for(self, predicate, timeout=30.0):
        """Wait until predicate(self) is true (re-checked on every store change)."""
        deadline = time.time() + timeout
        with self.store.lock:
            while True:
                r = predicate(self)
                if r:
                    return r
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError("condition not met in %.1fs" % timeout)
                self.store.cond.wait(min(left, 0.5))

    def requests(self, method=None, path_regex=None):
        rx = re.compile(path_regex) if path_regex else None
        return [r for r in list(self.request_log)
                if (method is None or r["method"] == method) and (rx is None or rx.search(r["path"]))]


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description="Test Kubernetes API server (pods, PVCs; HTTPS, bearer "
                                 "token). Writes STATE_DIR/kubeconfig when ready; serves until SIGTERM.")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", default=None, help="bearer token (default: random)")
    ap.add_argument("--namespace", default="default", help="the kubeconfig context's namespace")
    ap.add_argument("--history", type=int, default=1000, help="watch events kept (older: 410)")
    ap.add_argument("--bookmark-interval", type=float, default=5.0)
    ap.add_argument("--default-storage-class", default=None)
    ap.add_argument("--pvc-protection", action="store_true",
                    help="add the kubernetes.io/pvc-protection finalizer to new PVCs")
    ap.add_argument("--persist", action="store_true",
                    help="save the objects to STATE_DIR/store.json at exit and load them (and the "
                    "previous port, if free) at start")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    srv = ApiServer(args.state_dir, token=args.token, host=args.host, port=args.port,
                    namespace=args.namespace, history_limit=args.history,
                    bookmark_interval=args.bookmark_interval,
                    default_storage_class=args.default_storage_class,
                    pvc_protection=args.pvc_protection, verbose=args.verbose)
    store_file = os.path.join(srv.state_dir, "store.json")
    if args.persist and os.path.exists(store_file):
        with open(store_file) as f:
            srv.store.load(json.load(f))
    url_file = os.path.join(srv.state_dir, "url")
    if args.persist and args.port == 0 and os.path.exists(url_file):
        # a restarted server comes back on its previous port when it is free
        try:
            with open(url_file) as f:
                old_port = int(f.read().strip().rsplit(":", 1)[1])
            probe = socket.socket()
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, old_port))
            probe.close()
            srv.port = old_port
        except (OSError, ValueError, IndexError):
            pass
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    signal.signal(signal.SIGINT, lambda *a: done.set())
    srv.start()
    print("apiserver ready at %s (kubeconfig %s)" % (srv.url, srv.kubeconfig_path), flush=True)
    while not done.wait(1):
        pass
    srv.stop()
    if args.persist:
        tmp = store_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(srv.store.dump(), f)
        os.replace(tmp, store_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
