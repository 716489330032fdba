"""What is inside the image (``sglpatch.ship.sbom``): the packages of its CycloneDX SBOM audited
for known vulnerabilities, and the one-line summary of the audit. The SBOM made in a built image:
tests/ship/test_image_build.py."""

from __future__ import annotations

from sglpatch.ship import sbom


def test_our_local_version_is_audited_as_the_upstream_release_it_patches():
    bom = {
        "components": [
            {"name": "sglang", "version": "0.5.9+kimi.2", "purl": "pkg:pypi/sglang@0.5.9%2Bkimi.2"},
            {"name": "torch", "version": "2.9.1", "purl": "pkg:pypi/torch@2.9.1"},
            {"name": "libc", "version": "2.36", "purl": "pkg:deb/debian/libc6@2.36"},
        ]
    }
    assert sbom.audit_requirements(bom) == (["sglang==0.5.9", "torch==2.9.1"], {"sglang": "0.5.9"})


def test_an_audit_that_pypi_answered_for_no_package_is_not_reported_as_clean():
    report = {"audited": False, "error": "PyPI's advisory data answered for none of the 2 packages (...)"}
    assert sbom.summary(report).startswith("not audited")
    found = {
        "audited": True,
        "dependencies": [
            {"name": "a", "version": "1", "vulns": [{"id": "X"}]},
            {"name": "b", "version": "1", "vulns": []},
            {"name": "c", "version": "1", "skip_reason": "unknown"},
        ],
    }
    assert sbom.summary(found) == "1 known vulnerability in 1 of 2 audited packages (1 unknown to PyPI)"
