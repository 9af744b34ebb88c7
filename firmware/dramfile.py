"""The DRAM model's image files (``$readmemh`` / ``$writememh`` in ``sim_top.v``).

An image is a ``numpy.uint8`` array of shape ``(words, word_bytes)``. In the file each
word is one line of hex digits, most significant byte first, so byte ``p`` of a word
is bits ``[8p+7:8p]`` of the Verilog word.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_hex(path: Path | str, image: np.ndarray) -> None:
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 2:
        raise ValueError(f"DRAM image must be 2-D (words, word_bytes), not {image.shape}")
    digits = image[:, ::-1].tobytes().hex()
    width = 2 * image.shape[1]
    text = "\n".join(digits[i:i + width] for i in range(0, len(digits), width))
    Path(path).write_text(text + "\n")


def read_hex(path: Path | str, word_bytes: int) -> np.ndarray:
    lines = [ln for ln in Path(path).read_text().split()
             if not ln.startswith(("//", "@"))]
    width = 2 * word_bytes
    bad = next((ln for ln in lines if len(ln) != width), None)
    if bad is not None:
        raise ValueError(f"{path}: expected {width} hex digits per word, got {bad!r}")
    raw = np.frombuffer(bytes.fromhex("".join(lines)), dtype=np.uint8)
    return raw.reshape(-1, word_bytes)[:, ::-1].copy()
