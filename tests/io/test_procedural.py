import importlib
import multiprocessing
import operator
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq.io import texture, virtual_camera

procedural = importlib.import_module("streamseq.io.procedural")


@pytest.fixture(scope="module")
def image():
    return texture(96, 128, seed=5)


def test_texture(image):
    assert image.shape == (96, 128, 3) and image.dtype == np.uint8
    assert image.std() > 20  # detailed, not flat
    np.testing.assert_array_equal(image, texture(96, 128, seed=5))
    assert not np.array_equal(image, texture(96, 128, seed=6))


def test_frames(image):
    cam = virtual_camera(image, length=50, size=(20, 30), seed=1)
    frames = cam[0:50]
    assert len(cam) == 50
    assert frames.shape == (50, 20, 30, 3) and frames.dtype == np.uint8
    assert cam[49:60].shape == (1, 20, 30, 3) and cam[60:70].shape == (0, 20, 30, 3)
    # the camera moves smoothly: consecutive frames are closer than distant ones
    step = np.abs(np.diff(frames.astype(int), axis=0)).mean()
    far = np.abs(frames[:25].astype(int) - frames[25:].astype(int)).mean()
    assert 0 < step < far


@given(reads=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=6))
def test_any_reading_order_gives_the_same_frames(image, reads):
    cam = virtual_camera(image, length=40, size=(12, 16), seed=2)
    whole = virtual_camera(image, length=40, size=(12, 16), seed=2)[0:40]
    for a, n in reads:
        np.testing.assert_array_equal(cam[a : a + n], whole[a : a + n])


def test_seed_and_parameters_change_the_path(image):
    a = virtual_camera(image, length=10, size=(12, 16), seed=0)[0:10]
    assert not np.array_equal(a, virtual_camera(image, length=10, size=(12, 16), seed=1)[0:10])
    still = virtual_camera(image, length=10, size=(12, 16), speed=0.0)[0:10]
    assert (still == still[0]).all()  # no speed, no motion


def test_identity_pose_samples_the_image():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (10, 14, 3), dtype=np.uint8)
    ys, xs = np.mgrid[0:10, 0:14].astype(float)
    np.testing.assert_array_equal(procedural._bilinear(img, ys, xs), img)
    # half-way between two pixels: their mean; beyond the edge: mirrored
    mid = procedural._bilinear(img, np.array([[2.0]]), np.array([[3.5]]))
    np.testing.assert_array_equal(mid[0, 0], np.rint((img[2, 3] + img[2, 4].astype(float)) / 2))
    np.testing.assert_array_equal(
        procedural._bilinear(img, np.array([[-1.0]]), np.array([[-2.0]]))[0, 0], img[1, 2]
    )


def test_pickle_and_worker_processes(image):
    cam = virtual_camera(image, length=20, size=(12, 16), seed=3)
    ref = cam[5:9]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(cam))[5:9], ref)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(operator.getitem, (cam, slice(5, 9)))
    np.testing.assert_array_equal(got, ref)


def test_bad_arguments(image):
    with pytest.raises(ValueError, match="uint8"):
        virtual_camera(image.astype(float), length=3)
    with pytest.raises(ValueError, match="length"):
        virtual_camera(image, length=-1)


def test_a_virtual_camera_waits_on_no_network(image):
    # Its frames are drawn by this process (no file, no request): in a worker process its
    # first reads are the writer's, one by one, as those of a local file are.
    assert virtual_camera(image, length=4, size=(8, 8)).on_network is False


@pytest.mark.parametrize(
    "options, name",
    [
        ({"length": 2.5}, "length"),
        ({"length": float("nan")}, "length"),
        ({"length": float("inf")}, "length"),
        ({"size": (2.5, 8)}, "size"),
        ({"size": (0, 8)}, "size"),
        ({"size": (-8, 8)}, "size"),
        ({"speed": float("nan")}, "speed"),
        ({"view": float("nan")}, "view"),
        ({"view": 0}, "view"),
        ({"zoom": 0}, "zoom"),
        ({"zoom": -1.0}, "zoom"),
        ({"rotation": float("inf")}, "rotation"),
        ({"tilt": float("nan")}, "tilt"),
        ({"image": np.zeros((0, 0, 3), np.uint8)}, "image"),
    ],
)
def test_settings_that_draw_no_frame_are_refused_when_the_camera_is_made(options, name):
    # (a NaN speed or view drew black frames, a length or size of 2.5 was cut to 2,
    # silently; a zoom of 0 or an empty image failed when read, unnamed)
    kwargs = {"image": texture(32, 32, seed=0), "length": 3, "size": (8, 8), **options}
    with pytest.raises((TypeError, ValueError), match=name):
        virtual_camera(**kwargs)


@pytest.mark.parametrize(
    "options, name",
    [
        ({"speed": "fast"}, "speed"),
        ({"speed": None}, "speed"),
        ({"zoom": [1.5]}, "zoom"),
        ({"tilt": 10**400}, "tilt"),
        ({"size": 64}, "size"),
        ({"size": None}, "size"),
    ],
)
def test_settings_of_another_kind_are_refused_naming_them(options, name):
    # (float() or len() failed on them: "could not convert string to float: 'fast'",
    # "object of type 'int' has no len()", naming no setting)
    kwargs = {"image": texture(32, 32, seed=0), "length": 3, "size": (8, 8), **options}
    with pytest.raises((TypeError, ValueError), match=rf"^{name}\b"):
        virtual_camera(**kwargs)
