import functools

import numpy as np
import pytest
from runner import load
from servers import s3_server  # noqa: F401

from streamseq.io import probe, tokens, video
from streamseq.testing import check_continuity

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def download(server, urls, folder):
    """The local copies of ``s3://`` URLs of the server's bucket."""
    client, paths = server.client(), []
    for url in urls:
        bucket, key = url[len("s3://") :].split("/", 1)
        path = folder / key.replace("/", "_")
        path.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        paths.append(path)
    return paths


def test_reads_the_bucket_as_the_files_on_disk(s3_server, tmp_path, capsys):  # noqa: F811
    module = load("object_storage")
    cache = tmp_path / "lengths.json"
    result = module.run(s3_server.endpoint, "testing", "testing", "examples", cache=str(cache))
    out = capsys.readouterr().out
    assert f"{s3_server.endpoint}: 5 videos and 8 token files in s3://examples/demo/" in out
    assert "batch 0: clip0.mp4@0*, " in out  # the first clip starts the first row
    assert "frames/s" in out and "tokens/s" in out
    assert result["frames"] == [20, 29, 38, 47, 56]
    assert all(url.startswith("s3://examples/demo/") for url in result["videos"])

    videos = [video(p) for p in download(s3_server, result["videos"], tmp_path)]
    docs = [tokens(p) for p in download(s3_server, result["docs"], tmp_path)]
    assert [len(v) for v in videos] == result["frames"]
    assert [len(d) for d in docs] == result["tokens"]
    check_continuity(result["frame_batches"], result["frames"], sources=videos)
    check_continuity(result["token_batches"], result["tokens"], sources=docs)

    # the cache holds every URL with its ETag and no credentials; probing the same files
    # again measures nothing. (Not a second run of the example: it encodes and uploads its
    # videos anew, and the encoder does not give the same bytes from run to run, so their
    # ETags change and they are rightly measured again.)
    text = cache.read_text()
    assert all(url in text for url in result["videos"] + result["docs"])
    assert "etag" in text and "testing" not in text
    options = module.s3_options(s3_server.endpoint, "testing", "testing")
    openers = [functools.partial(video, url, storage_options=options) for url in result["videos"]]
    openers += [functools.partial(tokens, url, storage_options=options) for url in result["docs"]]
    measured = []
    real = probe._measure
    try:
        probe._measure = lambda opener: measured.append(opener) or real(opener)
        again = probe.probe_lengths(openers, cache=str(cache), progress=False)
    finally:
        probe._measure = real
    assert again == result["frames"] + result["tokens"] and measured == []


def test_main_starts_a_local_server_when_given_no_endpoint(capsys):
    result = load("object_storage").main(["--workers", "0", "--bucket", "standalone"])
    out = capsys.readouterr().out
    assert "http://127.0.0.1:" in out and "s3://standalone/demo/" in out
    assert sum(np.asarray(b.valid).sum() for b in result["token_batches"]) == sum(result["tokens"])
