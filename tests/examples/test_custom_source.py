import pickle

import numpy as np
import pytest
from runner import load


@pytest.mark.parametrize("workers", ["0", "2"])
def test_custom_sources_stream_whole_and_in_order(workers, capsys):
    result = load("custom_source").main(["--logs", "4", "--waves", "2", "--workers", workers])
    assert result["lengths"] == [40, 77, 114, 151, 60, 80]
    assert result["shape"] == (4, 25, 3)
    assert "check_continuity" in capsys.readouterr().out


def test_sensor_log_slices_like_an_array(tmp_path):
    module = load("custom_source")
    path = str(tmp_path / "log.csv")
    module.write_log(path, 30, seed=1)
    log = module.SensorLog(path)
    whole = log[:]
    assert whole.shape == (30, 3) and len(log) == 30
    np.testing.assert_array_equal(log[7:19], whole[7:19])
    np.testing.assert_array_equal(log[-1], whole[29])
    assert log[5:5].shape == (0, 3)
    log[0:3]  # opens the file ...
    copy = pickle.loads(pickle.dumps(log))  # ... which is not pickled
    assert copy._file is None
    np.testing.assert_array_equal(copy[3:9], whole[3:9])
    log.close()
    with pytest.raises(IndexError):
        log[30]


def test_sine_waves_slices_like_an_array():
    waves = load("custom_source").SineWaves(20, 0.05)
    whole = waves[:]
    assert whole.shape == (20, 3)
    np.testing.assert_allclose(waves[4:9], whole[4:9])
    np.testing.assert_allclose(waves[6], whole[6])
