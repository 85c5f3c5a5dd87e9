import numpy as np
import pytest
from helpers import assert_same
from runner import load
from servers import s3_server  # noqa: F401

from streamseq import StreamLoader
from streamseq.io import lerobot
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
    assert [e.index for e in streams] == list(range(5))
    # several episodes in a file: episodes 0-2 share a table and a video
    assert streams[0].path == streams[2].path != streams[3].path
    assert streams[2].videos[module.CAMERA].start == (30 + 43) / module.FPS
    assert len(streams[2]._table_rows().row_groups) > 1  # an episode across row groups
    check_continuity(batches, lengths, sources=streams)

    steps = 0
    for batch in batches:
        valid = batch.valid.numpy()
        frames = batch.data[module.CAMERA].numpy()[valid]
        states = batch.data["observation.state"].numpy()[valid]
        actions = batch.data["action"].numpy()[valid]
        assert frames.shape[1:] == (module.HEIGHT, module.WIDTH, 3)
        for frame, state in zip(frames, states, strict=True):
            np.testing.assert_allclose(module.square_position(frame), state, atol=1.0)
        # the action of a step is the move to the state of the next step (of its episode:
        # a row of a chunk holds one episode)
        state = batch.data["observation.state"].numpy()
        both = valid[:, 1:] & valid[:, :-1]
        moves = (state[:, 1:] - state[:, :-1])[both]
        np.testing.assert_array_equal(moves, batch.data["action"].numpy()[:, :-1][both])
        assert np.abs(actions).max() < 8  # one step moves a few pixels
        steps += len(states)
    assert steps == sum(lengths)


def test_same_batches_in_process(tmp_path):
    module = load("robot_episodes")
    workers = module.main(["--episodes", "4", "--out", str(tmp_path), "--workers", "2"])
    in_process = StreamLoader(workers["streams"], 3, 16, num_workers=0)
    assert_same(list(in_process), workers["batches"])


def test_read_from_a_bucket_by_url(request, tmp_path, capsys):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = request.getfixturevalue("s3_server")
    module = load("robot_episodes")
    url = f"s3://{server.bucket}/robot"
    argv = ["--episodes", "4", "--out", str(tmp_path / "b"), "--workers", "2", "--url", url]
    argv += ["--endpoint", server.endpoint, "--key", "testing", "--secret", "testing"]
    remote = module.main(argv)
    out = capsys.readouterr().out
    assert f"4 episodes of [30, 43, 56, 69] frames in {url}" in out
    streams = remote["streams"]
    assert streams[0].path == f"{url}/data/chunk-000/file-000.parquet"
    assert "testing" not in repr(streams)
    # the files uploaded, read from disk (an encoder may not give the same bytes twice)
    local = lerobot(str(tmp_path / "b"), columns=["observation.state", "action"])
    check_continuity(remote["batches"], remote["lengths"], sources=local)
    assert_same(list(StreamLoader(local, 3, 16)), remote["batches"])
