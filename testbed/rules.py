"""The shipped PrometheusRule evaluated by Prometheus's own rule engine: ``promtool test rules`` (built from Go
modules by scripts/kube-binaries.sh --promtool) on series as a scrape found them, held for a while."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import ROOT

PROMETHEUS_RULE = ROOT / "manifests" / "components" / "monitoring" / "prometheusrule.yaml"
Sample = tuple[str, Mapping[str, str], float]  # name, labels, value


def selector(name: str, labels: Mapping[str, str]) -> str:
    """``name{a="b", ...}`` as PromQL writes a series."""
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def promtool_test(
    promtool: Path,
    work: Path,
    samples: Sequence[Sample],
    *,
    extra_rules: Sequence[Mapping[str, Any]] = (),
    expressions: Sequence[Mapping[str, Any]] = (),
    minutes: int = 30,
) -> str:
    """Run ``promtool test rules`` over the shipped rules plus ``extra_rules`` (one group of them), with each of
    ``samples`` held at its value every minute for ``minutes``, checking ``expressions`` (promtool's
    promql_expr_test items); AssertionError with promtool's report when one fails. Returns that report."""
    work.mkdir(parents=True, exist_ok=True)
    shipped = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    (work / "shipped.yaml").write_text(yaml.safe_dump(shipped))
    (work / "extra.yaml").write_text(yaml.safe_dump({"groups": [{"name": "extra", "rules": list(extra_rules)}]}))
    series = [{"series": selector(name, labels), "values": f"{value:g}x{minutes}"} for name, labels, value in samples]
    test = {
        "rule_files": ["shipped.yaml", "extra.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": list(expressions)}],
    }
    (work / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run(
        [str(promtool), "test", "rules", "test.yaml"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"promtool test rules failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
