"""JUnit XML for CI systems: one test suite per run, one test case per node and check."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

from toolkit.report.text import outcome_of, value_text


def render_junit(summary: dict[str, Any]) -> str:
    """The run as JUnit XML (``testsuites`` > ``testsuite`` per node > ``testcase`` per check).

    A failed check is a ``<failure>``; a check not measured is ``<skipped message=...>`` with
    its reason (never a plain passed test case); a passed check has neither.

    Args:
        summary: The run summary.

    Returns:
        The XML document.
    """
    root = ET.Element("testsuites", name=f"gpunode acceptance {summary['run_id']}")
    total = failures = skips = 0
    for node in summary["nodes"]:
        checks = node.get("checks") or []
        failed = [c for c in checks if outcome_of(c) == "failed"]
        skipped = [c for c in checks if outcome_of(c) == "not_measured"]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=node["host"],
            tests=str(len(checks)),
            failures=str(len(failed)),
            errors="0",
            skipped=str(len(skipped)),
        )
        for check in checks:
            case = ET.SubElement(suite, "testcase", classname=node["host"], name=check["name"])
            if outcome_of(check) == "not_measured":
                skip = ET.SubElement(
                    case, "skipped", message=f"not measured: {check.get('reason') or '-'}"
                )
                skip.text = check["message"]
            elif outcome_of(check) == "failed":
                failure = ET.SubElement(case, "failure", message=check["message"])
                failure.text = (
                    f"measured: {value_text(check.get('measured'))}; "
                    f"floor: {value_text(check.get('floor'))}"
                )
                if check.get("failure_class"):
                    failure.set("type", str(check["failure_class"]))
                    failure.text += (
                        f"; class: {check['failure_class']}; next action: {check.get('action')}"
                        f" (source: {check.get('action_source')})"
                    )
        if not checks:
            case = ET.SubElement(suite, "testcase", classname=node["host"], name="verdict")
            ET.SubElement(case, "failure", message="no checks ran")
        total += max(1, len(checks))
        failures += len(failed) or (0 if checks else 1)
        skips += len(skipped)
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("skipped", str(skips))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
