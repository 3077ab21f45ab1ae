"""Every GPU row says how far its figures can be trusted, and a row that claims to be checked says where and when."""

from __future__ import annotations

import re

import pytest

from provision.compat import load_db

DB = load_db()
# The labels the resolver and the report understand; a misspelt one would silently drop the "unverified" warning.
LABELS = {"verified", "derived", "uncertain", "unverified"}


@pytest.mark.parametrize("gpu", DB.gpus, ids=lambda g: g.model)
def test_gpu_row_names_its_confidence_source_and_date(gpu):
    assert gpu.confidence in LABELS, f"{gpu.model}: confidence {gpu.confidence!r} is not one of {sorted(LABELS)}"
    assert re.fullmatch(r"https?://\S+", gpu.source), f"{gpu.model}: source {gpu.source!r} is not a URL"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", gpu.checked), f"{gpu.model}: checked {gpu.checked!r} is not a date"


def test_the_gpus_people_type_most_are_checked_rows():
    # Re-read against a source in issue 15; keep them from sliding back to "unverified" unnoticed.
    checked = {
        "GeForce RTX 4090", "GeForce RTX 4080", "GeForce RTX 4070", "GeForce RTX 3090", "GeForce RTX 3080 10GB",
        "GeForce RTX 3060", "GeForce RTX 2080 Ti", "GeForce GTX 1080 Ti", "Tesla V100 PCIe 16GB", "A100 PCIe 40GB",
        "A100 SXM4 80GB", "NVIDIA A10", "NVIDIA L40S", "Tesla P40", "Tesla T4", "L4", "H100 SXM5 80GB",
    }
    rows = {g.model: g for g in DB.gpus}
    assert checked <= rows.keys(), sorted(checked - rows.keys())
    assert [m for m in sorted(checked) if rows[m].confidence != "verified"] == []
