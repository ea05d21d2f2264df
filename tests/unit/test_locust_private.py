"""Private Locust APIs are used in loadgen/locust_private.py only (issue #20 item 3), and each
one it uses still exists in the installed Locust."""

from __future__ import annotations

from locust.runners import MasterRunner, WorkerRunner

import re

from tests.conftest import ROOT

#: runner._x, environment._x, ... : an attribute with a leading underscore of a Locust object.
PRIVATE = re.compile(r"\b(?:runner|environment|env|web_ui|parsed_options|stats|dispatcher)\._[a-z]\w*")


def test_only_the_adapter_reaches_into_locust() -> None:
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in (ROOT / "tokenload").rglob("*.py")
        if p.name != "locust_private.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not hits, "\n".join(hits)
    adapter = (ROOT / "tokenload" / "loadgen" / "locust_private.py").read_text()
    assert PRIVATE.search(adapter), "the probe finds nothing even where it should"


def test_the_private_apis_the_adapter_uses_exist() -> None:
    assert callable(WorkerRunner._send_stats)
    # set in MasterRunner.__init__; the class's source names it
    import inspect

    assert "_users_dispatcher" in inspect.getsource(MasterRunner)
