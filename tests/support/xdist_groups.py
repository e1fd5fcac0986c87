"""`make test`'s `--dist loadgroup` groups tests by their `xdist_group` mark again.

pytest-xdist 3.8 tells its controller a test's group by appending `@<group>` to the test's node
id on the worker (it writes `item._nodeid`). pytest 9.2 keeps an item's id in `item._id` (a
structured node id), so that write is lost: no test reports a group and every grouped test is
scheduled on its own, on any worker (pytest-dev/pytest-xdist#1386). Run after xdist's hook, this
one carries the suffixed id over to where pytest reads it. Without xdist's loadgroup, or with a
pytest/xdist pair that already groups, it changes nothing.

The groups: `browser` (one worker starts the browser server and its stack), `tasks-processes`,
and the tests that launch whole stacks as `make run` does, in three groups of a few minutes each
(`stack-e2e`, `stack-work`, `stack-ui`) so the workers share them. A group is one unit of work:
the scheduler hands out the larger groups before single tests, so these long tests start first
and never form the run's tail.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Set on xdist's workers only (xdist.remote.setup_config), from `--dist loadgroup`.
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and grouped != item.nodeid and hasattr(item, "_id"):
            # The same parse pytest applies to a string id; the string itself is kept as given.
            item._id = type(item._id).parse(grouped)  # type: ignore[attr-defined]
