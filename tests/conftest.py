"""Shared pytest options and the order files are run in."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/cases/*/expected.yaml from the current output; review the diff",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``slow`` first. ``make test`` hands whole files to pytest-xdist workers in
    collection order; a long file handed out last would run alone while the other workers
    idle. The sort is stable, so each file keeps its own order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
