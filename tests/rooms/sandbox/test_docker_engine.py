"""Connecting to the Docker engine (sandbox/docker/engine.py) when there is none: one
sentence naming the fix, and nothing left open. Needs no engine: that is the point."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest

from airlock.errors import EngineUnavailable
from airlock.sandbox.docker import connect


def test_an_engine_that_is_not_there_is_one_sentence_and_leaves_no_socket_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's own version detection left a unix socket unclosed on every such attempt.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(EngineUnavailable) as refused:
            connect()
        gc.collect()
    assert f"cannot reach the Docker engine at DOCKER_HOST=unix://{tmp_path}" in str(refused.value)
    assert "correct DOCKER_HOST" in str(refused.value)
    assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []
