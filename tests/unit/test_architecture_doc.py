"""docs/architecture.md names modules that exist (a renamed or moved module must be renamed
there too), no tokenload module is over 500 lines unless it is mostly data (issue #20), and
docs/benchmarks.md lists every bench script."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
#: Modules over 500 lines: each mostly data.
LONG_KNOWN = {
    "loadgen/option_table.py",  # the declaration of every option: a table
}


def test_every_module_the_doc_names_exists() -> None:
    text = DOC.read_text()
    named = set(re.findall(r"`(?:tokenload/)?([a-z_]+/[a-z_]+\.py)", text))
    bare = set(re.findall(r"`([a-z_]+\.py)`", text)) | set(re.findall(r"[ (`/]([a-z_]+\.py)\b", text))
    assert len(named) > 10
    missing = [m for m in named if not (ROOT / "tokenload" / m).exists() and not (ROOT / m).exists()]
    assert not missing, missing
    files = {p.name for d in ("tokenload", "tests", "bench") for p in (ROOT / d).rglob("*.py")}
    assert not [b for b in bare if b not in files], [b for b in bare if b not in files]


def test_no_module_over_500_lines_but_the_known_ones() -> None:
    long = {
        str(p.relative_to(ROOT / "tokenload"))
        for p in (ROOT / "tokenload").rglob("*.py")
        if len(p.read_text().splitlines()) > 500
    }
    assert long <= LONG_KNOWN, sorted(long - LONG_KNOWN)


def test_every_bench_script_is_listed_in_the_benchmarks_doc() -> None:
    # A bench nobody can find is a figure nobody reruns: each script in bench/ (not a helper
    # module, named with a leading underscore) has its line in docs/benchmarks.md.
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) > 10
    assert not [s for s in scripts if f"bench/{s}" not in text], [
        s for s in scripts if f"bench/{s}" not in text
    ]


def test_every_failure_class_is_in_the_measuring_doc() -> None:
    # Walkthrough: the doc's hand-written list lacked prompt_count, which reports name.
    from tokenload.metrics.failures import FAILURE_CLASSES

    text = (ROOT / "docs" / "measuring.md").read_text()
    assert [k for k in FAILURE_CLASSES if f"`{k}`: {FAILURE_CLASSES[k]}" not in text] == []
