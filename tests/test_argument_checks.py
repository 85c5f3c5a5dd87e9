import fractions

import numpy as np
import pytest

from streamseq._checks import check_int
from streamseq.io import EVENT_DTYPE, events


@pytest.mark.parametrize(
    "value",
    [
        fractions.Fraction(2**60 + 1, 2),  # 2**59 + 0.5: its float is whole
        np.longdouble(2**60) + np.longdouble(0.5),
        2.5,
        float("nan"),
        float("inf"),
        np.float32("nan"),
        True,
        np.bool_(False),
        "3",
    ],
)
def test_a_number_that_is_not_whole_is_refused_even_where_its_float_is(value):
    # (its float was asked whether it is whole: a fraction or long double past 2**53
    # whose float rounds to a whole number was cut to it, silently)
    if isinstance(value, np.longdouble) and np.finfo(np.longdouble).nmant < 61:
        pytest.skip("long double is no wider than a float here")
    with pytest.raises(TypeError, match="t0 must be an integer"):
        check_int(value, "t0")
    with pytest.raises(TypeError, match="t0 must be an integer"):
        events(np.zeros(2, EVENT_DTYPE), window_us=10, height=1, width=1, t0=value)


@pytest.mark.parametrize(
    "value, whole",
    [
        (fractions.Fraction(2**61, 2), 2**60),
        (np.longdouble(2**60), 2**60),
        (1e300, int(1e300)),
        (np.float32(3.0), 3),
        (np.uint64(2**64 - 1), 2**64 - 1),
        (5, 5),
    ],
)
def test_a_whole_number_of_any_kind_is_its_int(value, whole):
    assert check_int(value, "x") == whole
    assert type(check_int(value, "x")) is int
