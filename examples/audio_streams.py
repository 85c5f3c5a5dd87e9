"""Stream audio files in temporally coherent batches of frames of samples.

Synthesises a few sounds (chirps, tones with vibrato, beats, tone bursts), writes them
with PyAV in several codecs and sample rates (WAV, FLAC, AAC at 16, 22.05 and 44.1 kHz),
streams them with :func:`streamseq.io.audio` (mono, resampled to 16 kHz, 512 samples a
step) through :class:`streamseq.StreamLoader` with two worker processes, prints what each
row of each batch holds and draws the first batches in ``audio_streams.png``: one strip
per batch row, one column per step, batches side by side; each strip shows the waveform
over a spectrogram (one spectrum per step). A red bar marks a row starting a new file,
grey columns are padding.

Run: ``python examples/audio_streams.py [--out out/] [--small]``
"""

from __future__ import annotations

import argparse
import os

import av
import numpy as np
from PIL import Image, ImageDraw

import streamseq
from streamseq.io import audio

RATE = 16000  # sample rate of the streams
GAP = 2  # pixels between rows of the picture
SEP = 6  # pixels between batches
WAVE = 24  # height of the waveform, in pixels
BINS = 48  # height of the spectrogram, in pixels
RED = (230, 30, 30)
PAD = (60, 60, 60)
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
    """Rows = batch rows, columns (``width`` pixels each) = steps, batches side by side."""
    b, t = batches[0].data.shape[:2]
    sheet = Image.new(
        "RGB",
        (len(batches) * (t * width + SEP) - SEP, b * (WAVE + BINS + GAP) - GAP),
        "white",
    )
    pen = ImageDraw.Draw(sheet)
    for i, batch in enumerate(batches):
        data = batch.data[..., 0].numpy()  # mono: [B, T, frame]
        for r in range(b):
            top = r * (WAVE + BINS + GAP)
            for s in range(t):
                left = (i * t + s) * width + i * SEP
                box = [left, top, left + width - 1, top + WAVE + BINS - 1]
                if not batch.valid[r, s]:
                    pen.rectangle(box, fill=PAD)
                    continue
                pen.rectangle([left, top, left + width - 1, top + WAVE - 1], fill=(20, 20, 30))
                samples = data[r, s].reshape(width, -1)  # min and max per pixel column
                for x, (lo, hi) in enumerate(zip(samples.min(1), samples.max(1), strict=True)):
                    y0, y1 = (top + WAVE / 2 - v * WAVE / 2 for v in (hi, lo))
                    pen.line([left + x, y0, left + x, y1], fill=(120, 220, 120))
                heat = spectrum(data[r, s])
                colours = (np.stack([heat, heat**2, 0.4 + 0.2 * heat], -1) * 255).astype(np.uint8)
                column = np.repeat(colours[:, None], width, axis=1)
                sheet.paste(Image.fromarray(column), (left, top + WAVE))
                if s == 0 and batch.reset[r]:
                    pen.rectangle([left, top, left + 2, top + WAVE + BINS - 1], fill=RED)
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
