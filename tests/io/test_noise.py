import hashlib

import numpy as np
import pytest

from streamseq.io._noise import value_noise

FORMS = [{}, {"wrap": True}, {"smoothstep": True}, {"wrap": True, "smoothstep": True}]


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("size", [(1, 1), (7, 5), (33, 47), (64, 64)])
def test_a_field_in_the_unit_interval_made_from_one_draw(form, size):
    field = value_noise(np.random.default_rng(3), *size, 6, **form)
    assert field.shape == size and field.dtype == np.float64
    assert 0 <= field.min() and field.max() <= 1
    np.testing.assert_array_equal(field, value_noise(np.random.default_rng(3), *size, 6, **form))
    rng = np.random.default_rng(3)
    value_noise(rng, *size, 6, **form)
    cells = 6 if form.get("wrap") else 7
    expected = np.random.default_rng(3)
    expected.random((cells, cells))
    assert rng.random() == expected.random()  # the grid, nothing more, is drawn


@pytest.mark.parametrize("form", FORMS)
def test_pixels_on_grid_points_take_their_values(form):
    cells = 4
    grid = np.random.default_rng(0).random((cells + (0 if form.get("wrap") else 1),) * 2)
    field = value_noise(np.random.default_rng(0), 8 * cells, 8 * cells, cells, **form)
    np.testing.assert_allclose(field[::8, ::8], grid[:cells, :cells])


def test_a_wrapped_field_tiles_without_a_seam():
    field = value_noise(np.random.default_rng(1), 40, 40, 5, wrap=True, smoothstep=True)
    inside = np.abs(np.diff(field, axis=1)).max()
    seam = np.abs(field[:, 0] - field[:, -1]).max()
    assert seam <= inside
    seam = np.abs(field[0] - field[-1]).max()
    assert seam <= np.abs(np.diff(field, axis=0)).max()


def test_the_fields_are_those_the_synthetic_sources_always_had():
    # synthetic_events draws a plain field, texture wrapped and smoothstepped ones: the
    # recordings and images made from a seed must not change
    plain = value_noise(np.random.default_rng(7), 33, 47, 6)
    tiled = value_noise(np.random.default_rng(7), 33, 47, 6, wrap=True, smoothstep=True)
    assert digest(plain) == "93170bd0608d1e76c80194715cb79c668f9fd593e33fb7dda6a55aafa01572fa"
    assert digest(tiled) == "3a822a44567577afa14581a099382363505fef76dc6259c9ce55609b11df0faf"
