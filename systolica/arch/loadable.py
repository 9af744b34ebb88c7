"""What a chip is given to run one program: the contract between the compiler and
everything that runs its output (the golden model, the RTL harness, the board
driver)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica.arch import fetch, image_file
from systolica.arch.errors import ImageError


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
      None: the registers' reset values (the chip's configuration);
    * ``fetch_from``: the PROG_FETCH register the program was scheduled for, the
      first instruction the fetcher reads (:func:`~systolica.arch.fetch.fetch_start`:
      the host preloads the instructions below ``min(fetch_from, imem_depth,
      count)``); None: its reset value, ``imem_depth`` (the host preloads what fits);
    * ``chip``, ``fingerprint``, ``checksum``: the stamp (docs/image-format.md): the
      name and ``ChipConfig.program_key`` of the chip it was compiled for and the CRC-32 of
      ``image``. Make one with :meth:`for_chip`; every consumer calls :meth:`verify`.
    """
    image: bytes
    dram: np.ndarray | tuple[tuple[int, np.ndarray], ...]
    prog_addr: int | None = None
    ubuf: tuple[int, int] | None = None
    fetch_from: int | None = None
    chip: str = field(kw_only=True)
    fingerprint: str = field(kw_only=True)
    checksum: int = field(kw_only=True)

    @classmethod
    def for_chip(cls, cfg, image: bytes, dram, prog_addr: int | None = None,
                 ubuf: tuple[int, int] | None = None, fetch_from: int | None = None
                 ) -> Loadable:
        """A Loadable of `image` compiled for chip `cfg` (a ChipConfig, the hardware:
        a moved UBUF goes in `ubuf`), stamped with its name, fingerprint and the
        image's checksum."""
        if not isinstance(image, (bytes, bytearray)):
            raise TypeError(f"a Loadable's image must be bytes (isa.to_bytes of the "
                            f"program words), not {type(image).__name__}")
        image = bytes(image)
        return cls(image, dram, prog_addr, ubuf, fetch_from, chip=cfg.name,
                   fingerprint=cfg.program_key,
                   checksum=image_file.checksum(image))

    @classmethod
    def from_file(cls, program: image_file.ProgramImage, dram) -> Loadable:
        """A Loadable of an image file's program (``image_file.unpack``) with the DRAM
        image `dram`, stamped with the header's chip."""
        return cls(program.words, dram, program.prog_addr, program.ubuf, program.fetch_from,
                   chip=program.chip,
                   fingerprint=program.fingerprint, checksum=image_file.checksum(program.words))

    def __post_init__(self):
        if not isinstance(self.image, (bytes, bytearray)):
            raise TypeError(f"a Loadable's image must be bytes (isa.to_bytes of the "
                            f"program words), not {type(self.image).__name__}")
        if not (isinstance(self.chip, str) and isinstance(self.fingerprint, str)
                and isinstance(self.checksum, int)):
            raise TypeError(f"a Loadable's stamp is the chip's name and fingerprint "
                            f"(str) and the image's CRC-32 (int): make it with "
                            f"Loadable.for_chip(cfg, image, dram), not chip={self.chip!r}, "
                            f"fingerprint={self.fingerprint!r}, checksum={self.checksum!r}")
        if self.ubuf is not None and (not isinstance(self.ubuf, tuple) or len(self.ubuf) != 2):
            raise TypeError(f"a Loadable's ubuf must be (base, rows) or None, not "
                            f"{self.ubuf!r}")
        if self.fetch_from is not None and (
                isinstance(self.fetch_from, bool) or not isinstance(self.fetch_from, int)
                or not 0 <= self.fetch_from < 1 << 32):
            raise TypeError(f"a Loadable's fetch_from (the PROG_FETCH register) must be "
                            f"an integer in [0, 2**32) or None, not {self.fetch_from!r}")

    def verify(self, cfg, consumer: str) -> None:
        """Refuse (:class:`ImageError`, naming `consumer`) to run on chip `cfg` if the
        image no longer matches its checksum or was compiled for another chip."""
        got = image_file.checksum(bytes(self.image))
        if got != self.checksum:
            raise ImageError(
                f"{consumer}: the program image is corrupted: its CRC-32 is {got:#010x}, "
                f"it was stamped {self.checksum:#010x} when it was compiled for chip "
                f"{self.chip}; do not run it: compile it again (or stamp a new image "
                f"with Loadable.for_chip)")
        why = image_file.chip_mismatch(f"{consumer}: the program", self.chip,
                                       self.fingerprint, cfg)
        if why:
            raise ImageError(why)

    def preload(self, cfg) -> int:
        """How many instructions the host writes into the instruction memory (and the
        value it writes to PROG_FETCH): ``P`` of :func:`~systolica.arch.fetch.fetch_start`."""
        return fetch.fetch_start(cfg, len(self.image) // image_file.WORD_BYTES,
                                 self.fetch_from)

    def to_file(self) -> bytes:
        """The image file of its program (docs/image-format.md): the words with the
        chip, PROG_ADDR, UBUF and PROG_FETCH registers in the header."""
        return image_file.pack_stamped(self.chip, self.fingerprint, bytes(self.image),
                                       prog_addr=self.prog_addr, ubuf=self.ubuf,
                                       fetch_from=self.fetch_from)

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
