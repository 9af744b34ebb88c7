"""What a chip is given to run one program: the contract between the compiler and
everything that runs its output (the golden model, the RTL harness, the board
driver)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Loadable:
    """A program ready to run.

    * ``image``: the program image (``isa.to_bytes`` of its 128-bit words);
    * ``dram``: the initial DRAM image from word 0, uint8 ``(words, cfg.rows)``, or
      ``(first_word, image)`` segments; the words outside it are zeros;
    * ``prog_addr``: the PROG_ADDR register, where a program longer than the
      instruction memory is fetched from (the host writes the image there too); None:
      the program is not fetched (it must fit the instruction memory);
    * ``ubuf``: ``(UBUF_BASE, UBUF_ROWS)`` as the host writes them before the run;
      None: the registers' reset values (the chip's configuration).
    """
    image: bytes
    dram: np.ndarray | tuple[tuple[int, np.ndarray], ...]
    prog_addr: int | None = None
    ubuf: tuple[int, int] | None = None

    def __post_init__(self):
        if not isinstance(self.image, (bytes, bytearray)):
            raise TypeError(f"a Loadable's image must be bytes (isa.to_bytes of the "
                            f"program words), not {type(self.image).__name__}")
        if self.ubuf is not None and (not isinstance(self.ubuf, tuple) or len(self.ubuf) != 2):
            raise TypeError(f"a Loadable's ubuf must be (base, rows) or None, not "
                            f"{self.ubuf!r}")

    def segments(self) -> list[tuple[int, np.ndarray]]:
        """The initial DRAM as ``(first_word, uint8 image)`` pieces: the image from
        word 0, or the segments as given."""
        pieces = list(self.dram) if isinstance(self.dram, (list, tuple)) \
            else [(0, self.dram)]
        out = []
        for first, data in pieces:
            data = np.asarray(data)
            out.append((int(first), data.view(np.uint8) if data.dtype == np.int8
                        else data))
        return out

    def dram_image(self) -> np.ndarray:
        """The DRAM image from word 0 up to the last word given (segments merged)."""
        if not isinstance(self.dram, (list, tuple)):
            return np.asarray(self.dram)
        pieces = [(int(first), np.asarray(data)) for first, data in self.dram]
        end = max((first + data.shape[0] for first, data in pieces), default=0)
        width = next((data.shape[1] for _, data in pieces if data.ndim == 2), 1)
        out = np.zeros((end, width), dtype=np.uint8)
        for first, data in pieces:
            out[first:first + data.shape[0]] = data.view(np.uint8) \
                if data.dtype == np.int8 else data
        return out
