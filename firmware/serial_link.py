"""The link's transport on a real serial port (``pyserial``, from the ``fpga``
extra: ``pip install -e '.[fpga]'``)."""

from __future__ import annotations

import asyncio
import time

from systolica.firmware.link import LinkTimeout


class SerialTransport:
    """A serial port at ``baud``, 8N1. Blocking reads run in a thread, so a caller's
    event loop keeps going."""

    def __init__(self, port: str, *, baud: int):
        try:
            import serial
        except ImportError:
            raise RuntimeError("the serial link needs pyserial: install the fpga extra "
                               "(.venv/bin/pip install -e '.[fpga]')") from None
        try:
            self.port = serial.Serial(port, baudrate=baud, timeout=0)
        except (serial.SerialException, ValueError) as exc:
            raise RuntimeError(f"cannot open serial port {port} at {baud} baud: {exc}") \
                from None

    def close(self) -> None:
        self.port.close()

    async def send(self, data: bytes) -> None:
        self.port.write(data)
        self.port.flush()

    async def receive(self, count: int, timeout_s: float) -> bytes:
        out = bytearray()
        deadline = time.monotonic() + timeout_s
        while len(out) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LinkTimeout(f"got {len(out)} of {count} bytes in {timeout_s:.3f} s")
            self.port.timeout = left
            out += await asyncio.to_thread(self.port.read, count - len(out))
        return bytes(out)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def discard_input(self) -> None:
        self.port.reset_input_buffer()
