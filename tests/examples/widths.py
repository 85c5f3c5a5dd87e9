"""Imported by the tests of this folder as ``widths``: the steps the examples' GRU reads."""

import sys

import pytest


@pytest.fixture
def read_widths(monkeypatch):
    """The number of steps of every call of ``models.Predictor``, recorded (load first)."""
    seen: list[int] = []

    def patch() -> list[int]:
        predictor = sys.modules["models"].Predictor
        forward = predictor.forward

        def recording(self, x, h):
            seen.append(x.shape[1])
            return forward(self, x, h)

        monkeypatch.setattr(predictor, "forward", recording)
        return seen

    return patch
