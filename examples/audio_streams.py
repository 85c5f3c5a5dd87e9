"""Stream audio files in temporally coherent batches of frames of samples.

Synthesises a few sounds (chirps, tones with vibrato, beats, tone bursts), writes them
with PyAV in several codecs and sample rates (WAV, FLAC, AAC at 16, 22.05 and 44.1 kHz),
streams them with :func:`streamseq.io.audio` (mono, resampled to 16 kHz, 512 samples a
step) through :class:`streamseq.StreamLoader` with two worker processes, prints what each
row of each batch holds and draws the first batches in ``audio_streams.png``: each batch a
block headed ``batch i``, one strip per batch row and one column per step, the blocks left
to right then line by line; each strip shows the waveform over a spectrogram (one
spectrum per step) and names the stream and step it starts with. A red bar marks a row
starting a new file, grey columns are padding.

Run: ``python examples/audio_streams.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

import streamseq
from streamseq.io import audio

RATE = 16000  # sample rate of the streams
PAGE = 800  # pixels: the width of the page the picture is drawn for
GAP = 2  # pixels between rows of the picture
SEP = 14  # pixels between the blocks of batches
LABEL = 44  # pixels left of the blocks, for the row names
HEADER = 18  # pixels above a block, for its name
LEGEND = 24  # pixels below the blocks, for the legend
WAVE = 24  # height of the waveform, in pixels
BINS = 48  # height of the spectrogram, in pixels
RED = (230, 30, 30)
PAD = (110, 110, 110)
WAVE_COLOUR = (120, 220, 120)
FORMATS = [("pcm_s16le", "wav", 16000), ("flac", "flac", 22050), ("aac", "m4a", 44100)]


def sound(kind: int, seconds: float, rate: int) -> np.ndarray:
    """One of a few test sounds, float32 in [-1, 1]."""
    t = np.arange(int(seconds * rate)) / rate
    if kind == 0:  # rising chirp
        x = np.sin(2 * np.pi * (200 * t + 1500 * t**2 / seconds))
    elif kind == 1:  # tone with vibrato
        x = np.sin(2 * np.pi * 880 * t + 40 * np.sin(2 * np.pi * 5 * t))
    elif kind == 2:  # beating tones
        x = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.5 * np.sin(2 * np.pi * 446 * t)
    elif kind == 3:  # tone bursts, four a second
        x = np.sin(2 * np.pi * 2000 * t) * (np.sin(2 * np.pi * 4 * t) > 0.3)
    else:  # falling chirp
        x = np.sin(2 * np.pi * (3500 * t - 1500 * t**2 / seconds))
    return (0.5 * x).astype(np.float32)


def write_sounds(folder: str, count: int, seconds: float) -> list[str]:
    """Write ``count`` sounds of different lengths, codecs and sample rates."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(count):
        codec, ext, rate = FORMATS[k % len(FORMATS)]
        path = os.path.join(folder, f"sound{k}.{ext}")
        x = sound(k % 5, seconds * (1 + 0.35 * (k % 4)), rate)
        with av.open(path, "w") as out:
            stream = out.add_stream(codec, rate=rate, layout="mono")
            for i in range(0, len(x), 4096):
                frame = av.AudioFrame.from_ndarray(x[None, i : i + 4096], "flt", "mono")
                frame.sample_rate, frame.pts = rate, i
                out.mux(stream.encode(frame))
            out.mux(stream.encode())
        paths.append(path)
    return paths


def spectrum(frame: np.ndarray) -> np.ndarray:
    """Log magnitude of one frame in BINS bands (0 to 8 kHz), scaled to [0, 1]."""
    magnitude = np.abs(np.fft.rfft(frame * np.hanning(len(frame))))[1:]
    bands = magnitude[: len(magnitude) // BINS * BINS].reshape(BINS, -1).mean(axis=1)
    return np.clip((np.log10(bands + 1e-4) + 2.5) / 3.5, 0, 1)[::-1]  # low pitch at the bottom


def draw(batches: list[streamseq.Batch], width: int) -> Image.Image:
    """Draw the batches as blocks, left to right then line by line, about ``PAGE`` wide.

    In a block, one strip per batch row and ``width`` pixels per step: the waveform over
    the spectrogram, the first step of the row captioned ``stream:step``.
    """
    b, t = batches[0].data.shape[:2]
    block = t * width
    per_line = max(1, min(len(batches), (PAGE - LABEL + SEP) // (block + SEP)))
    strip = WAVE + BINS
    height = HEADER + b * (strip + GAP) + SEP
    lines = -(-len(batches) // per_line)
    sheet = Image.new(
        "RGB", (LABEL + per_line * (block + SEP) - SEP, lines * height + LEGEND), "white"
    )
    pen = ImageDraw.Draw(sheet)
    face, small = ImageFont.load_default(size=12), ImageFont.load_default(size=10)
    for i, batch in enumerate(batches):
        line, place = divmod(i, per_line)
        x0, y0 = LABEL + place * (block + SEP), line * height + HEADER
        pen.text((x0, y0 - HEADER + 2), f"batch {i}", fill="black", font=face)
        data = batch.data[..., 0].numpy()  # mono: [B, T, frame]
        for r in range(b):
            top = y0 + r * (strip + GAP)
            if place == 0:
                pen.text((4, top + strip // 2 - 7), f"row {r}", fill="black", font=face)
            for s in range(t):
                left = x0 + s * width
                box = [left, top, left + width - 1, top + strip - 1]
                if not batch.valid[r, s]:
                    pen.rectangle(box, fill=PAD)
                    continue
                pen.rectangle([left, top, left + width - 1, top + WAVE - 1], fill=(20, 20, 30))
                samples = data[r, s].reshape(width, -1)  # min and max per pixel column
                for x, (lo, hi) in enumerate(zip(samples.min(1), samples.max(1), strict=True)):
                    y_hi, y_lo = (top + WAVE / 2 - v * WAVE / 2 for v in (hi, lo))
                    pen.line([left + x, y_hi, left + x, y_lo], fill=WAVE_COLOUR)
                heat = spectrum(data[r, s])
                colours = (np.stack([heat, heat**2, 0.4 + 0.2 * heat], -1) * 255).astype(np.uint8)
                column = np.repeat(colours[:, None], width, axis=1)
                sheet.paste(Image.fromarray(column), (left, top + WAVE))
            if batch.valid[r, 0]:
                caption = f"{int(batch.stream[r, 0])}:{int(batch.step[r, 0])}"
                bar = 3 if batch.reset[r] else 0
                right, bottom = pen.textbbox(
                    (x0 + bar + 1, top + strip - 12), caption, font=small
                )[2:]
                pen.rectangle([x0 + bar, top + strip - 12, right + 1, bottom], fill="black")
                pen.text((x0 + bar + 1, top + strip - 12), caption, fill="white", font=small)
            if batch.reset[r]:
                pen.rectangle([x0, top, x0 + 2, top + strip - 1], fill=RED)
    legend = [
        (WAVE_COLOUR, "waveform"),
        ((190, 120, 140), "spectrum, 0-8 kHz upwards"),
        (RED, "a new file starts (reset)"),
        (PAD, "padding"),
        (None, "s:k = stream s, step k"),
    ]
    x, y = 4, sheet.size[1] - LEGEND + 4
    for colour, text in legend:
        if colour is not None:
            pen.rectangle([x, y + 1, x + 11, y + 12], fill=colour)
            x += 16
        pen.text((x, y), text, fill="black", font=face)
        x = int(pen.textbbox((x, y), text, font=face)[2]) + 16
    return sheet


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for the picture (and sounds)")
    parser.add_argument("--sounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="shortest sound")
    parser.add_argument("--frame", type=int, default=512, help="samples per step")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=8)
    parser.add_argument("--batches", type=int, default=8, help="batches to draw")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="short sounds, for tests")
    args = parser.parse_args(argv)
    if args.small:
        args.sounds, args.seconds, args.frame = 4, 0.2, 256
        args.batch_size, args.tbins, args.batches = 3, 4, 3
    width = 16  # pixels per step in the picture
    if args.frame % width:
        parser.error(f"--frame must be a multiple of {width}")

    paths = write_sounds(os.path.join(args.out, "sounds"), args.sounds, args.seconds)
    streams = [audio(p, sample_rate=RATE, frame=args.frame, layout="mono") for p in paths]
    loader = streamseq.StreamLoader(streams, args.batch_size, args.tbins, num_workers=args.workers)
    print(f"{len(streams)} sounds, {[len(s) for s in streams]} steps of {args.frame} samples")
    print(f"{len(loader)} batches of {args.batch_size} rows x {args.tbins} steps")
    batches = []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        batches.append(batch)
        print(f"batch {i}")
        for r in range(args.batch_size):
            valid = batch.valid[r]
            if not valid.any():
                print(f"  row {r}: padding")
                continue
            steps = batch.step[r][valid]
            rms = float(batch.data[r][valid].pow(2).mean().sqrt())
            print(
                f"  row {r}: {os.path.basename(paths[int(batch.stream[r, 0])])} steps "
                f"{int(steps[0])}-{int(steps[-1])}{' (reset)' if batch.reset[r] else ''}, "
                f"rms {rms:.3f}"
            )

    picture = os.path.join(args.out, "audio_streams.png")
    draw(batches, width).save(picture)
    print(f"wrote {picture}")
    return {"picture": picture, "batches": len(batches), "width": width}


if __name__ == "__main__":
    main()
