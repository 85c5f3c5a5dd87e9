"""Aligned recordings: a video, its sound, an event camera and labels on one time grid.

Writes a few synthetic takes of one scene: a white ball swinging left and right over a
dark background, filmed at 30 frames per second (``take_K.mp4``); a tone whose pitch
follows the ball (low on the left, high on the right; 16 kHz, ``take_K.wav``); the events
an event camera of the same view records as the ball moves (``take_K.npy``), and one
label per frame saying in which third of the picture the ball is.

:func:`streamseq.io.recording` zips the four onto steps of 50 ms: a step holds the frame
shown at its start (the 30 fps video at 20 steps per second), its 800 audio samples, the
histogram of its events and the label in force. Two worker processes read the takes;
every modality's decoder goes on from step to step. The example prints what the first
batches hold and draws the first rows: frames over their waveform, their events and their
label, step by step.

Run: ``python examples/aligned_recording.py [--takes 3] [--workers 2] [--out out/]``
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import av
import numpy as np
from PIL import Image, ImageDraw

import streamseq
from streamseq.io import EVENT_DTYPE, audio, events, recording, video

# pictures.py lies beside this file: found when run as a script and when loaded by path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pictures import PAD, RED, font  # noqa: E402

FPS, RATE, STEP = 30, 16000, 0.05  # video frames and audio samples per second; seconds a step
HEIGHT, WIDTH, RADIUS = 48, 64, 6
LOW, HIGH = 40.0, 200.0  # Hz: the tone with the ball at the left edge and at the right edge
EVENT_US = 2000  # the event camera renders the scene every 2 ms
THRESHOLD = 0.25  # log-intensity change that fires an event

PAGE = 800  # pixels: the width of the page the picture is drawn for
LABEL = 44  # pixels left of the rows, for their names
CELL = 92  # pixels: the width of a step in the picture
FRAME_H, WAVE_H, EVENTS_H, TEXT_H = 69, 30, 46, 14
GAP, HEADER, LEGEND = 4, 18, 24
WAVE_COLOUR = (30, 90, 200)
NAMES = ("left", "middle", "right")


def ball_x(t: np.ndarray, take: int) -> np.ndarray:
    """The ball's centre, in pixels from the left, at times ``t`` (seconds) of a take."""
    speed = 3.0 + 0.8 * take  # radians per second
    return WIDTH / 2 + (WIDTH / 2 - RADIUS - 2) * np.sin(speed * t + 0.7 * take)


def ball_y(take: int) -> float:
    return HEIGHT / 2 + 8 * ((take % 3) - 1)


def render(x: float, y: float) -> np.ndarray:
    """The scene with the ball at ``(x, y)``: intensities in [0, 1], ``[HEIGHT, WIDTH]``."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH] + 0.5
    disk = np.clip(RADIUS + 0.5 - np.hypot(xx - x, yy - y), 0.0, 1.0)
    return 0.12 + 0.8 * disk


def third(x: np.ndarray) -> np.ndarray:
    """The label of a ball position: 0 left, 1 middle, 2 right third of the picture."""
    return np.clip((np.asarray(x) * 3 // WIDTH).astype(np.int64), 0, 2)


def write_take(folder: str, take: int, seconds: float) -> dict[str, Any]:
    """Write the video, sound and events of one take; the paths and the frame labels."""
    stem = os.path.join(folder, f"take_{take}")
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    frames = round(seconds * FPS)
    t_frames = np.arange(frames) / FPS
    y = ball_y(take)
    with av.open(stem + ".mp4", "w") as out:
        stream = out.add_stream(codec, rate=FPS)
        stream.height, stream.width, stream.pix_fmt = HEIGHT, WIDTH, "yuv420p"
        stream.codec_context.thread_count = 1  # (two writes may still differ by a few levels)
        for x in ball_x(t_frames, take):
            grey = (render(x, y) * 255).astype(np.uint8)
            image = np.repeat(grey[..., None], 3, axis=2)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode())

    t = np.arange(round(seconds * RATE)) / RATE
    pitch = LOW + (HIGH - LOW) * ball_x(t, take) / WIDTH
    tone = 0.5 * np.sin(2 * np.pi * np.cumsum(pitch) / RATE)  # phase follows the pitch
    with av.open(stem + ".wav", "w") as out:
        stream = out.add_stream("pcm_s16le", rate=RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(tone.astype(np.float32)[None], "flt", "mono")
        frame.sample_rate = RATE
        out.mux(stream.encode(frame))
        out.mux(stream.encode())

    found = []
    level = np.log(render(float(ball_x(np.zeros(1), take)[0]), y))
    for t_us in range(EVENT_US, round(seconds * 1e6), EVENT_US):
        now = np.log(render(float(ball_x(np.array([t_us / 1e6]), take)[0]), y))
        ys, xs = np.nonzero(np.abs(now - level) >= THRESHOLD)
        polarity = np.sign(now - level)[ys, xs].astype(np.int8)
        level[ys, xs] = now[ys, xs]
        found.append((np.full(len(ys), t_us), xs, ys, polarity))
    ev = np.zeros(sum(len(f[0]) for f in found), EVENT_DTYPE)
    for name, values in zip(("t", "x", "y", "p"), zip(*found, strict=True), strict=True):
        ev[name] = np.concatenate(values)
    np.save(stem + ".npy", ev)
    labels = third(ball_x(t_frames, take))
    return {"video": stem + ".mp4", "audio": stem + ".wav", "events": stem + ".npy",
            "times": t_frames, "labels": labels, "seconds": seconds}  # fmt: skip


def take_recording(files: dict[str, Any]) -> Any:
    """One take as a recording: steps of ``STEP`` seconds of the four modalities."""
    steps_us = round(files["seconds"] * 1e6)
    return recording(
        STEP,
        video=video(files["video"]),
        audio=audio(files["audio"]),
        # t0=0: the camera starts with the take; length: to its end, silent or not
        events=events(
            files["events"],
            window_us=EVENT_US,
            height=HEIGHT,
            width=WIDTH,
            t0=0,
            length=steps_us // EVENT_US,
        ),  # fmt: skip
        label=(files["times"], files["labels"]),
    )


def pitch(samples: np.ndarray) -> float:
    """The pitch of a tone, in Hz, from its zero crossings (0 for silence)."""
    x = np.asarray(samples).ravel()
    crossings = np.count_nonzero(np.diff(np.signbit(x)))
    return crossings / 2 / (len(x) / RATE)


def ball_in_frame(frame: np.ndarray) -> float:
    """Where the ball is in a frame: the mean column of its bright pixels (+0.5)."""
    xs = np.nonzero(np.asarray(frame).mean(axis=-1) > 128)[1]
    return float(xs.mean() + 0.5) if len(xs) else float("nan")


def draw(batches: list[Any], rows: int) -> Image.Image:
    """The first ``rows`` rows of the batches, one strip a row: frame, waveform, events, label.

    A column is a step; a strip follows one batch row over the steps of the batches
    given, left to right (as many as fit on the page).
    """
    steps = min((PAGE - LABEL) // CELL, sum(b.data["video"].shape[1] for b in batches))
    strip = FRAME_H + WAVE_H + EVENTS_H + TEXT_H
    size = (LABEL + steps * CELL, HEADER + rows * (strip + GAP) + LEGEND)
    sheet = Image.new("RGB", size, "white")
    pen = ImageDraw.Draw(sheet)
    face, small = font(12), font(10)
    data = {k: np.concatenate([b.data[k].numpy() for b in batches], axis=1)
            for k in ("video", "audio", "events", "label")}  # fmt: skip
    valid = np.concatenate([b.valid.numpy() for b in batches], axis=1)
    stream = np.concatenate([b.stream.numpy() for b in batches], axis=1)
    step = np.concatenate([b.step.numpy() for b in batches], axis=1)
    tbins = batches[0].data["video"].shape[1]
    for s in range(0, steps, tbins):
        pen.text((LABEL + s * CELL + 2, 2), f"batch {s // tbins}", fill="black", font=face)
    for r in range(rows):
        top = HEADER + r * (strip + GAP)
        pen.text((2, top + FRAME_H // 2 - 6), f"row {r}", fill="black", font=face)
        for s in range(steps):
            x0 = LABEL + s * CELL
            if not valid[r, s]:
                pen.rectangle([x0, top, x0 + CELL - 2, top + strip - 1], fill=PAD)
                pen.text((x0 + CELL // 2, top + strip // 2), "padding", fill="white",
                         font=small, anchor="mm")  # fmt: skip
                continue
            frame = Image.fromarray(data["video"][r, s]).resize((CELL - 1, FRAME_H))
            sheet.paste(frame, (x0, top))
            wave = data["audio"][r, s].ravel()
            y_mid = top + FRAME_H + WAVE_H / 2
            xs = x0 + np.arange(len(wave)) * (CELL - 1) / len(wave)
            ys = y_mid - wave * (WAVE_H - 4)
            pen.line(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=WAVE_COLOUR)
            counts = data["events"][r, s]  # [2, H, W]: off, on
            image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
            image[..., 0] = np.clip(counts[0] * 120, 0, 255)  # off: red
            image[..., 1] = np.clip(counts[1] * 120, 0, 255)  # on: green
            tile = Image.fromarray(image).resize((CELL - 1, EVENTS_H), Image.Resampling.NEAREST)
            sheet.paste(tile, (x0, top + FRAME_H + WAVE_H))
            words = f"{int(stream[r, s])}:{int(step[r, s])} {NAMES[int(data['label'][r, s])]}"
            bar = 3 if step[r, s] == 0 else 0  # a take starts: a red bar
            pen.text((x0 + 1 + bar, top + strip - TEXT_H + 1), words, fill="black", font=small)
            if bar:
                pen.rectangle([x0, top, x0 + bar - 1, top + strip - 1], fill=RED)
        for s in range(tbins, steps, tbins):  # batch boundaries
            x = LABEL + s * CELL - 1
            pen.line([x, top, x, top + strip], fill="black", width=1)
    legend = "frame at the step's start | its 800 audio samples | its events (green on, red off)"
    pen.text((4, size[1] - LEGEND + 5), legend + " | take:step label", fill="black", font=face)
    return sheet


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Write the takes, stream them and draw the first rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the takes and the picture")
    parser.add_argument("--takes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="shortest take")
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--tbins", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    folder = os.path.join(args.out, "takes")
    os.makedirs(folder, exist_ok=True)
    files = [write_take(folder, k, args.seconds + 0.6 * k) for k in range(args.takes)]
    takes = [take_recording(f) for f in files]
    lengths = [len(t) for t in takes]
    print(f"{len(takes)} takes of {lengths} steps of {STEP * 1000:g} ms")

    loader = streamseq.StreamLoader(takes, args.batch_size, args.tbins, num_workers=args.workers)
    batches = []
    for i, batch in enumerate(loader):
        batches.append(batch)
        if i < 3:
            shapes = {k: tuple(v.shape) for k, v in batch.data.items() if k != "valid"}
            print(f"batch {i}: {shapes}")
            for r in range(args.batch_size):
                if not batch.valid[r, 0]:
                    continue
                frame, sound = batch.data["video"][r, 0].numpy(), batch.data["audio"][r, 0]
                x = ball_in_frame(frame)
                expected = LOW + (HIGH - LOW) * x / WIDTH
                print(f"  row {r}: take {int(batch.stream[r, 0])} step {int(batch.step[r, 0]):2d}"
                      f"  ball at x={x:4.1f} ({NAMES[int(batch.data['label'][r, 0])]:>6}),"
                      f" tone {pitch(sound.numpy()):5.1f} Hz (expected {expected:5.1f}),"
                      f" {int(batch.data['events'][r, 0].sum()):3d} events")  # fmt: skip
    picture = os.path.join(args.out, "aligned_recording.png")
    draw(batches, args.batch_size).save(picture)
    print(f"picture: {picture}")
    return {"takes": takes, "files": files, "lengths": lengths, "batches": batches,
            "picture": picture}  # fmt: skip


if __name__ == "__main__":
    main()
