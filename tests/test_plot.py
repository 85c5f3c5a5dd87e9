import functools
import sys

import numpy as np
import pytest

from streamseq import StreamLoader, plot_plan
from streamseq.plan.planner import plan_epoch
from streamseq.plot import PADDING, PALETTE, PlanCells, plan_cells, plan_image

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LENGTHS = np.random.default_rng(0).integers(0, 40, 23)
STREAMS = [np.zeros(n) for n in LENGTHS]
T = 4


def batches_of_all_ranks(settings, epoch):
    """``stream [rows, batches*T]``, ``reset`` and first ``step`` of every global row."""
    world = settings.get("world_size", 1)
    stream, reset, step = [], [], []
    for rank in range(world):
        loader = StreamLoader(STREAMS, tbins=T, **{**settings, "rank": rank, "world_size": world})
        loader.set_epoch(epoch)
        got = list(loader)
        stream.append(np.concatenate([b.stream for b in got], axis=1))
        reset.append(np.stack([b.reset for b in got], axis=1))
        step.append(np.stack([b.step[:, 0] for b in got], axis=1))
    return np.vstack(stream), np.vstack(reset), np.vstack(step)


def check_cells(cells, stream, reset, step):
    """The cells say what the batches say: streams and padding per step, resets, cuts."""
    rows, batches = cells.shape
    assert stream.shape == (rows, batches * T)
    assert (cells.steps() == stream).all()
    assert ((cells.steps() < 0) == (stream < 0)).all()  # padding exactly where not valid
    assert (cells.valid == (stream >= 0).reshape(rows, batches, T).sum(-1)).all()
    assert ((cells.stream < 0) == (cells.valid == 0)).all()
    assert (cells.reset == reset).all()
    assert (cells.cut == (reset & (step > 0))).all()


SETTINGS = {
    "zeros": dict(batch_size=3),
    "drop": dict(batch_size=3, pad="drop"),
    "wrap": dict(batch_size=3, pad="wrap"),
    "pack": dict(batch_size=3, pad="pack"),
    "segments": dict(batch_size=3, segment_length=7),
    "two ranks": dict(batch_size=2, world_size=2, rank=0),
    "shuffle": dict(batch_size=3, shuffle=True, seed=5),
    "pack, segments, ranks, shuffle": dict(
        batch_size=2, world_size=2, rank=0, pad="pack", segment_length=9, shuffle=True, seed=1
    ),
    "pack, segments, cap": dict(
        batch_size=2, pad="pack", segment_length=5, max_streams_per_chunk=2
    ),
}


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("epoch", [0, 2])
def test_the_cells_are_what_the_batches_of_every_rank_say(name, epoch):
    settings = SETTINGS[name]
    loader = StreamLoader(STREAMS, tbins=T, **settings)
    cells = plan_cells(loader, epoch)
    assert cells.epoch == epoch and cells.world_size == settings.get("world_size", 1)
    assert cells.shape[1] == loader.epoch_length(epoch)
    check_cells(cells, *batches_of_all_ranks(settings, epoch))


@pytest.mark.parametrize("name", SETTINGS)
def test_the_cells_come_from_the_plan_alone_without_the_loader(name):
    settings = SETTINGS[name]
    loader = StreamLoader(STREAMS, tbins=T, **settings)
    spec = loader.spec
    for cells in (plan_cells(spec, 2), plan_cells(spec, plan_epoch(spec, 2))):
        assert cells.epoch == 2
        check_cells(cells, *batches_of_all_ranks(settings, 2))
    assert (plan_cells(spec).stream == plan_cells(loader).stream).all()  # epoch 0
    with pytest.raises(TypeError, match="a PlanSpec"):
        plan_cells(STREAMS)


def test_pack_cells_hold_several_streams_and_name_the_one_with_most_steps():
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T, pad="pack")
    cells = plan_cells(loader)
    steps = cells.steps().reshape(*cells.shape, T)
    shared = 0
    for r, i in np.ndindex(cells.shape):
        held = steps[r, i][steps[r, i] >= 0]
        if len(held):
            ids, counts = np.unique(held, return_counts=True)
            assert counts[ids == cells.stream[r, i]][0] == counts.max()
            shared += len(ids) > 1
    assert shared > 0  # the layout does put several streams in one cell


def test_a_resumed_epoch_on_other_rows_is_drawn_with_the_rows_that_go_on():
    run = StreamLoader(STREAMS, batch_size=2, tbins=T)
    it = iter(run)
    for _ in range(3):
        next(it)
    wider = StreamLoader(STREAMS, batch_size=3, tbins=T)
    wider.load_state_dict(run.state_dict())
    cells = plan_cells(wider)
    got = list(wider)
    stream = np.concatenate([b.stream for b in got], axis=1)
    reset = np.stack([b.reset for b in got], axis=1)
    step = np.stack([b.step[:, 0] for b in got], axis=1)
    check_cells(cells, stream, reset, step)
    assert not reset[:, 0].all()  # rows that go on with a begun stream have no reset


def test_groups_of_batches_take_the_stream_with_most_steps_and_their_share_of_padding():
    stream = np.array([[0, 0, 1, -1, 2], [3, 4, 4, 5, -1]])
    valid = np.array([[4, 1, 2, 0, 4], [1, 3, 1, 4, 0]])
    cells = PlanCells(0, "zeros", 4, 2, 1, None, stream, valid, stream > 9, stream > 9)
    image = plan_image(cells, max_columns=3)  # 5 batches: 2 a column
    assert image.per_column == 2 and image.rgb.shape == (2, 3, 3)
    assert image.extent == (-0.5, 5.5, 1.5, -0.5)
    shade = 1 - np.array([[5 / 8, 2 / 8, 4 / 4], [4 / 8, 5 / 8, 0]])
    major = np.array([[0, 1, 2], [4, 5, -1]])
    expect = PALETTE[major % len(PALETTE)] * (1 - shade[..., None]) + PADDING * shade[..., None]
    expect[major < 0] = PADDING
    assert np.abs(image.rgb.astype(int) - np.rint(expect)).max() <= 1


def test_a_small_plan_is_an_image_of_steps_and_a_large_one_of_groups():
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T, pad="pack")
    cells = plan_cells(loader)
    rows, batches = cells.shape
    image = plan_image(cells)
    assert image.rgb.shape == (rows, batches * T, 3) and image.per_column == 1 / T
    steps = cells.steps()
    assert (image.rgb[steps < 0] == PADDING).all()
    held = steps >= 0
    assert (image.rgb[held] == PALETTE[steps[held] % len(PALETTE)]).all()
    assert plan_image(cells, max_columns=batches).rgb.shape == (rows, batches, 3)
    assert plan_image(cells, max_columns=batches - 1).per_column == 2


def step_pixels(fig, ax, cells):
    """The RGB of the pixel at the centre of every step of the drawn figure, and whether
    it lies clear of the marks at the left edge of its cell (ticks, triangles)."""
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]
    rows, batches = cells.shape
    r, x = np.mgrid[:rows, : batches * T]
    centre = np.column_stack([((x + 0.5) / T - 0.5).ravel(), r.ravel()])
    edge = np.column_stack([(x // T - 0.5).ravel(), r.ravel()])
    xy = ax.transData.transform(centre)
    clear = xy[:, 0] - ax.transData.transform(edge)[:, 0] > 9  # pixels
    px = np.floor(xy[:, 0]).astype(int)
    py = rgb.shape[0] - 1 - np.floor(xy[:, 1]).astype(int)
    return rgb[py, px].reshape(rows, -1, 3), clear.reshape(rows, -1)


@pytest.mark.parametrize("name", ["zeros", "pack", "segments", "two ranks"])
def test_the_drawn_steps_are_grey_on_padding_and_coloured_elsewhere(name):
    loader = StreamLoader(STREAMS, tbins=T, **SETTINGS[name])
    cells = plan_cells(loader)
    fig = plot_plan(loader)
    try:
        pixels, clear = step_pixels(fig, fig.axes[0], cells)
    finally:
        plt.close(fig)
    steps = cells.steps()
    clear &= ~np.repeat(cells.cut, T, axis=1)  # (a triangle covers a segment's first steps)
    change = np.zeros_like(clear)  # (a dotted line where a packed stream starts)
    if cells.runs is not None:
        change[:, 1:] = (
            (steps[:, 1:] != steps[:, :-1]) & (steps[:, 1:] >= 0) & (steps[:, :-1] >= 0)
        )
    clear[:, 1:] &= ~change[:, 1:]
    clear[:, :-1] &= ~change[:, 1:]
    padding = (steps < 0) & clear
    assert padding.sum() > 0 and (pixels[padding] == PADDING).all()
    held = (steps >= 0) & clear
    assert held.sum() > 50
    assert (pixels[held] == PALETTE[steps[held] % len(PALETTE)]).all()


def test_the_figure_says_epoch_pad_rows_batches_and_padding():
    loader = StreamLoader(STREAMS, batch_size=2, tbins=T, world_size=2, rank=1, pad="pack")
    fig, ax = plt.subplots()
    try:
        assert plot_plan(loader, epoch=1, ax=ax) is fig
        title = ax.get_title()
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
    padding = 100 * plan_cells(loader, 1).padding
    batches = loader.epoch_length(1)
    assert title == (
        f"epoch 1, pad='pack': 4 rows (2 ranks x 2), {batches} batches of {T} steps, "
        f"{padding:.1f}% padding"
    )
    assert legend == [
        f"a stream (colours repeat every {len(PALETTE)} streams)",
        "padding",
        "reset",
        "stream start in a chunk",
    ]
    assert ax.get_ylabel() == "global row" and ax.get_xlabel() == "batch (a column per step)"


def test_a_plan_of_many_rows_and_batches_is_drawn_in_groups_of_batches():
    lengths = np.random.default_rng(1).integers(100, 3000, 400)
    openers = [functools.partial(np.zeros, n) for n in lengths.tolist()]  # never opened
    loader = StreamLoader(openers, batch_size=64, tbins=8, lengths=lengths.tolist())
    batches = len(loader)
    group = -(-batches // 500)
    fig = plot_plan(loader, max_columns=500)
    try:
        ax = fig.axes[0]
        image = ax.get_images()[0].get_array()
        assert group > 1 and image.shape == (64, -(-batches // group), 3)
        assert ax.get_xlabel() == f"batch (a column per {group} batches)"
        assert ax.get_xlim() == (-0.5, batches - 0.5)
    finally:
        plt.close(fig)


def test_without_matplotlib_the_error_says_what_to_install(monkeypatch):
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install streamseq\[plot\]"):
        plot_plan(loader)
    assert plan_cells(loader).shape[0] == 3  # the cells need no matplotlib


def test_a_bad_epoch_is_named():
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T)
    with pytest.raises(ValueError, match="epoch"):
        plan_cells(loader, -1)
    with pytest.raises(TypeError, match="epoch"):
        plan_cells(loader, 1.5)


def test_the_default_epoch_is_the_one_the_next_pass_reads():
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T, shuffle=True, seed=2)
    next(iter(loader))  # a peek: the next pass reads epoch 1
    assert plan_cells(loader).epoch == loader.epoch == 1
    cells = plan_cells(loader)
    got = list(loader)
    check_cells(
        cells,
        np.concatenate([b.stream for b in got], axis=1),
        np.stack([b.reset for b in got], axis=1),
        np.stack([b.step[:, 0] for b in got], axis=1),
    )
    assert plan_cells(loader).epoch == loader.epoch == 2  # after training: the next epoch
    fig = plot_plan(loader)
    try:
        assert fig.axes[0].get_title().startswith("epoch 2,")
    finally:
        plt.close(fig)


def mixture_loader(**settings):
    from streamseq import mix

    rng = np.random.default_rng(3)
    groups = {
        "web": [np.zeros(n) for n in rng.integers(5, 30, 6)],
        "books": [np.zeros(n) for n in rng.integers(5, 30, 3)],
        "code": [np.zeros(n) for n in rng.integers(5, 30, 4)],
    }
    weights = {"web": 1.0, "books": 3.0, "code": 1.0}  # books read about twice
    return StreamLoader(mix(groups, weights), batch_size=3, tbins=T, **settings)


def delivered_steps(loader, n):
    """Valid steps of every stream over a pass (the batches say it)."""
    got = np.concatenate([b.stream.reshape(-1) for b in loader])
    return np.bincount(got[got >= 0], minlength=n)


def repeated_mask(ax, shape):
    """The steps ``[rows, batches * T]`` that the hatched rectangles cover."""
    (marks,) = [c for c in ax.collections if c.get_gid() == "repeated"]
    assert "/" in marks.get_hatch()
    covered = np.zeros(shape, bool)
    for path in marks.get_paths():
        (x0, y0), (x1, y1) = path.vertices.min(0), path.vertices.max(0)
        row = int(round((y0 + y1) / 2))
        covered[row, int(round((x0 + 0.5) * T)) : int(round((x1 + 0.5) * T))] = True
    return covered


@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_a_mixture_is_coloured_by_group_with_its_repeated_streams_marked(pad):
    loader = mixture_loader(pad=pad)
    streams = loader.refs
    cells = plan_cells(loader)
    assert cells.groups == ("web", "books", "code")
    group = np.array([loader.spec.mixture.group_of(np.array([s]))[0] for s in range(13)])
    assert (cells.stream_group == group).all()
    lengths = np.array([len(s) for s in streams])
    repeated = delivered_steps(mixture_loader(pad=pad), len(streams)) > lengths
    assert repeated.any() and (cells.repeated == repeated).all()
    image = plan_image(cells)
    steps = cells.steps()
    held = steps >= 0
    dark = PALETTE[group[steps[held]] % 9]
    light = PALETTE[group[steps[held]] % 9 + 9]
    pixel = image.rgb[held]
    assert ((pixel == dark).all(-1) | (pixel == light).all(-1)).all()
    assert (image.rgb[~held] == PADDING).all()
    fig = plot_plan(loader, max_columns=steps.shape[1])  # a column per step
    try:
        ax = fig.axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        patches = ax.get_legend().get_patches()
        covered = repeated_mask(ax, steps.shape)
    finally:
        plt.close(fig)
    assert legend[:4] == ["web", "books", "code", "read more than once"]
    for g in range(3):
        assert np.allclose(patches[g].get_facecolor()[:3], PALETTE[g] / 255)
    assert (covered == (held & repeated[np.maximum(steps, 0)])).all()


def test_a_plan_of_more_streams_than_colours_says_they_repeat():
    fig = plot_plan(StreamLoader(STREAMS, batch_size=3, tbins=T))
    few = plot_plan(StreamLoader(STREAMS[:5], batch_size=3, tbins=T))
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        short = [t.get_text() for t in few.axes[0].get_legend().get_texts()]
        assert not [c for c in fig.axes[0].collections if c.get_gid() == "repeated"]
    finally:
        plt.close(fig)
        plt.close(few)
    assert len(STREAMS) > len(PALETTE)
    assert legend[0] == f"a stream (colours repeat every {len(PALETTE)} streams)"
    assert short[0] == "a stream (a colour each)"


def test_plot_plan_takes_the_loader_by_its_old_keyword():
    loader = StreamLoader(STREAMS, batch_size=3, tbins=T, shuffle=True)
    next(iter(loader))
    for fig, epoch in [
        (plot_plan(loader=loader), loader.epoch),
        (plot_plan(loader=loader, epoch=3), 3),
    ]:
        assert fig.axes[0].get_title().startswith(f"epoch {epoch},")
        plt.close(fig)
    with pytest.raises(TypeError, match="not both"):
        plot_plan(loader.spec, loader=loader)
