"""Verdicts -> JUnit XML (junit-xml): one testsuite per cell, one testcase per deliverable.

Fail becomes <failure>; in a Blocked cell a failed deliverable becomes <error> with the reason (the
run says nothing about the provider); Skipped and Not requested become <skipped>; key lines go to
system-out; the suite's properties name the result, the failure class, both commits and the image.
"""

from __future__ import annotations

from collections.abc import Iterable

from junit_xml import TestCase, TestSuite, to_xml_report_string

from verl_e2e.judge.verdict import Verdict


def suite(v: Verdict) -> TestSuite:
    cases = []
    share = (v.duration_s or 0.0) / max(1, len(v.deliverables))
    for d in v.deliverables:
        case = TestCase(
            name=d.name,
            classname=f"verl-e2e.L{v.level}.{v.variant}.{v.family}",
            elapsed_sec=share,
            stdout="\n".join(v.key_lines) or None,
        )
        if d.result == "Fail" and v.result == "Blocked":
            case.add_error_info(message=f"Blocked: {v.headline}", output=d.detail, error_type="Blocked")
        elif d.result == "Fail":
            case.add_failure_info(message=f"{d.name}: {d.detail}", output=v.headline)
        elif d.result in ("Skipped", "Not requested"):
            case.add_skipped_info(message=f"{d.result}: {d.detail}")
        cases.append(case)
    properties = {"result": v.result, "model": v.model, "failure_class": v.failure_class}
    for name in ("bridge", "verl"):
        info = v.repos.get(name)
        if isinstance(info, dict) and info.get("commit"):
            properties[f"{name}_commit"] = str(info.get("full_commit") or info["commit"])
    if v.comparison:
        properties["versus_merge_base"] = v.comparison["outcome"]
    image = v.repos.get("image")
    if isinstance(image, dict) and image.get("tag"):
        properties["image"] = str(image["tag"])
        properties["image_id"] = str(image.get("id") or "")
    return TestSuite(name=v.cell_id, test_cases=cases, properties=properties)


def render(verdicts: Iterable[Verdict]) -> str:
    xml: str = to_xml_report_string([suite(v) for v in verdicts], prettyprint=True, encoding="utf-8")
    return xml
