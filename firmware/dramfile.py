"""The DRAM model's image files (``$readmemh`` / ``$writememh`` in ``sim_top.v``).

An image is a ``numpy.uint8`` array of shape ``(words, word_bytes)``. In the file each
word is one line of hex digits, most significant byte first, so byte ``p`` of a word
is bits ``[8p+7:8p]`` of the Verilog word. A load file names only the words a run
needs: :func:`write_segments` puts an ``@<hex word address>`` line before each run of
words and leaves out zero words (the model is zeroed before a load), so a file's
size follows the data, not the memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _lines(image: np.ndarray) -> list[str]:
    digits = image[:, ::-1].tobytes().hex()
    width = 2 * image.shape[1]
    return [digits[i:i + width] for i in range(0, len(digits), width)]


def _image(image) -> np.ndarray:
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 2:
        raise ValueError(f"DRAM image must be 2-D (words, word_bytes), not {image.shape}")
    return image


def write_hex(path: Path | str, image: np.ndarray) -> None:
    """Every word of ``image``, from address 0, one line each."""
    Path(path).write_text("".join(f"{ln}\n" for ln in _lines(_image(image))))


def write_segments(path: Path | str, segments) -> None:
    """A load file of ``segments``, ``(first_word, image)`` pairs: the non-zero words
    of each, every run of them after the ``@address`` line of its first word."""
    out = []
    for first, image in segments:
        image = _image(image)
        live = image.any(axis=1)
        if not live.any():
            continue
        edges = np.flatnonzero(np.diff(np.concatenate(([0], live.view(np.int8), [0]))))
        lines = _lines(image)
        for lo, hi in zip(edges[::2], edges[1::2]):
            out.append(f"@{int(first) + int(lo):x}\n")
            out.extend(f"{ln}\n" for ln in lines[lo:hi])
    Path(path).write_text("".join(out))


def read_hex(path: Path | str, word_bytes: int) -> np.ndarray:
    lines = [ln for ln in Path(path).read_text().split()
             if not ln.startswith(("//", "@"))]
    width = 2 * word_bytes
    bad = next((ln for ln in lines if len(ln) != width), None)
    if bad is not None:
        raise ValueError(f"{path}: expected {width} hex digits per word, got {bad!r}")
    raw = np.frombuffer(bytes.fromhex("".join(lines)), dtype=np.uint8)
    return raw.reshape(-1, word_bytes)[:, ::-1].copy()
