import numpy as np
import pytest
from helpers import assert_same
from runner import load
from servers import s3_server  # noqa: F401

from streamseq.testing import check_continuity

pytest.importorskip("pyarrow")


def test_frames_states_and_actions_line_up(tmp_path, capsys):
    module = load("robot_episodes")
    result = module.main(["--episodes", "5", "--out", str(tmp_path), "--workers", "2"])
    out = capsys.readouterr().out
    assert "5 episodes of [30, 43, 56, 69, 30] frames" in out
    assert (
        "row 0: episode 0 step  0 (reset)  state [32.0, 40.0], square seen at [32.0, 40.0]" in out
    )
    batches, streams, lengths = result["batches"], result["streams"], result["lengths"]
    assert [e.rows.group for e in streams] == list(range(5))
    assert len(streams[2].rows.row_groups) > 1  # an episode across row groups
    check_continuity(batches, lengths, sources=streams)

    steps = 0
    for batch in batches:
        valid = batch.valid.numpy()
        frames = batch.data["frame"].numpy()[valid]
        states = batch.data["state"].numpy()[valid]
        actions = batch.data["action"].numpy()[valid]
        assert frames.shape[1:] == (module.HEIGHT, module.WIDTH, 3)
        for frame, state in zip(frames, states, strict=True):
            np.testing.assert_allclose(module.square_position(frame), state, atol=1.0)
        # the action of a step is the move to the state of the next step (of its episode:
        # a row of a chunk holds one episode)
        state = batch.data["state"].numpy()
        both = valid[:, 1:] & valid[:, :-1]
        moves = (state[:, 1:] - state[:, :-1])[both]
        np.testing.assert_array_equal(moves, batch.data["action"].numpy()[:, :-1][both])
        assert np.abs(actions).max() < 8  # one step moves a few pixels
        steps += len(states)
    assert steps == sum(lengths)


def test_same_batches_in_process(tmp_path):
    module = load("robot_episodes")
    in_process = module.main(["--episodes", "4", "--out", str(tmp_path / "a"), "--workers", "0"])
    workers = module.main(["--episodes", "4", "--out", str(tmp_path / "b"), "--workers", "2"])
    assert_same(in_process["batches"], workers["batches"])


def test_read_from_a_bucket_by_url(request, tmp_path, capsys):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = request.getfixturevalue("s3_server")
    module = load("robot_episodes")
    local = module.main(["--episodes", "4", "--out", str(tmp_path / "a"), "--workers", "0"])
    url = f"s3://{server.bucket}/robot"
    argv = ["--episodes", "4", "--out", str(tmp_path / "b"), "--workers", "2", "--url", url]
    argv += ["--endpoint", server.endpoint, "--key", "testing", "--secret", "testing"]
    remote = module.main(argv)
    out = capsys.readouterr().out
    assert f"4 episodes of [30, 43, 56, 69] frames in {url}" in out
    streams = remote["streams"]
    assert streams[0].rows.path == f"{url}/data.parquet"
    assert "testing" not in repr(streams)
    check_continuity(remote["batches"], remote["lengths"], sources=local["streams"])
    assert_same(local["batches"], remote["batches"])
