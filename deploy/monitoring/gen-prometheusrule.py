#!/usr/bin/python3
"""Writes prometheusrule.yaml (the Prometheus Operator's PrometheusRule) from rules.yaml, the
one source of the alert rules. Run after editing rules.yaml:

    python3 deploy/monitoring/gen-prometheusrule.py

tests/deploy/test_manifests.py checks that the two carry the same groups."""
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

HEADER = """\
# GENERATED from rules.yaml by gen-prometheusrule.py: edit rules.yaml, then run
# `python3 deploy/monitoring/gen-prometheusrule.py`. The same rules as a PrometheusRule, for
# the Prometheus Operator; its ruleSelector must match these labels (with kube-prometheus-stack,
# add its `release: <helm release>` label in your overlay; docs/deploy.md).
"""


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    # Multi-line strings (the PromQL expressions) as literal blocks, as in rules.yaml.
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


Dumper.add_representer(str, _str)


def prometheus_rule(rules):
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "compute",
            "namespace": "compute-system",
            "labels": {"app.kubernetes.io/part-of": "compute"},
        },
        "spec": rules,
    }


def main():
    with open(os.path.join(HERE, "rules.yaml")) as f:
        rules = yaml.safe_load(f)
    text = HEADER + yaml.dump(prometheus_rule(rules), Dumper=Dumper, sort_keys=False,
                              default_flow_style=False, width=100)
    out = os.path.join(HERE, "prometheusrule.yaml")
    with open(out, "w") as f:
        f.write(text)
    print("wrote " + os.path.relpath(out), file=sys.stderr)


if __name__ == "__main__":
    main()
