"""The package's namespace: public names, and submodules loaded on first use."""

import subprocess
import sys

import streamseq


def test_io_and_testing_are_reachable_after_import_streamseq_and_loaded_lazily():
    code = (
        "import sys, streamseq\n"
        "assert 'streamseq.io' not in sys.modules and 'av' not in sys.modules\n"
        "assert 'streamseq.testing' not in sys.modules and 'hypothesis' not in sys.modules\n"
        "assert callable(streamseq.io.video) and callable(streamseq.io.tokens)\n"
        "assert callable(streamseq.testing.check_continuity)\n"
        "assert 'io' in dir(streamseq) and 'testing' in dir(streamseq)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_unknown_attribute_is_an_attribute_error():
    try:
        streamseq.nothing_here  # noqa: B018
    except AttributeError as e:
        assert "nothing_here" in str(e)
    else:
        raise AssertionError("no AttributeError")


def test_all_is_sorted_and_public():
    assert streamseq.__all__ == sorted(streamseq.__all__)
    assert all(hasattr(streamseq, name) for name in streamseq.__all__)
    assert {"StepInfo", "map_steps", "StreamLoader"} <= set(streamseq.__all__)
