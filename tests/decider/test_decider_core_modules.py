"""The decider's core is a stack of rooms: the observation, the evaluation, the status, the
step, reconcile on top; none imports back into a room that imports it (type-only imports too)."""

from __future__ import annotations

import grimp


def test_no_module_of_the_decider_core_is_in_an_import_circle() -> None:
    graph = grimp.build_graph("gpuscale_decider")
    core = sorted(m for m in graph.modules if m.startswith("gpuscale_decider.core."))
    assert "gpuscale_decider.core.reconcile" in core
    circles = {
        module: graph.find_shortest_chain(importer=module, imported=importer)
        for module in core
        for importer in graph.find_modules_that_directly_import(module)
        if graph.find_shortest_chain(importer=module, imported=importer) is not None
    }
    assert circles == {}
