"""The link's transport in a cocotb simulation of the FPGA top: the host's end of
the UART, driving ``rx`` and sampling ``tx`` bit by bit (:mod:`.link`)."""

from __future__ import annotations

import cocotb
from cocotb.queue import Queue
from cocotb.simtime import get_sim_time
from cocotb.triggers import FallingEdge, SimTimeoutError, Timer, with_timeout

from systolica.firmware.link import LinkCorrupt, LinkTimeout

_FRAMING_ERROR = -1


class CocotbUart:
    """The UART lines ``dut.rx`` (driven) and ``dut.tx`` (sampled) at ``divisor``
    clock periods of ``period_ns`` per bit. :meth:`start` before use."""

    def __init__(self, dut, *, divisor: int, period_ns: int):
        self.dut, self.bit_ns = dut, divisor * period_ns
        self._received: Queue[int] = Queue()
        self._task = None

    def start(self) -> None:
        self.dut.rx.value = 1
        self._task = cocotb.start_soon(self._receive_forever())

    async def send(self, data: bytes) -> None:
        rx = self.dut.rx
        for byte in data:
            for bit in (0, *((byte >> i) & 1 for i in range(8)), 1):
                rx.value = bit
                await Timer(self.bit_ns, unit="ns")

    async def receive(self, count: int, timeout_s: float) -> bytes:
        out = bytearray()
        deadline = get_sim_time("ns") + timeout_s * 1e9
        while len(out) < count:
            left = deadline - get_sim_time("ns")
            try:
                if left <= 0:
                    raise SimTimeoutError()
                byte = await with_timeout(self._received.get(), int(left) + 1, "ns")
            except SimTimeoutError:
                raise LinkTimeout(f"got {len(out)} of {count} bytes in "
                                  f"{timeout_s * 1e6:.1f} us") from None
            if byte == _FRAMING_ERROR:
                raise LinkCorrupt("a byte from the board had no stop bit (UART framing)")
            out.append(byte)
        return bytes(out)

    async def sleep(self, seconds: float) -> None:
        await Timer(max(1, round(seconds * 1e9)), unit="ns")

    def discard_input(self) -> None:
        while not self._received.empty():
            self._received.get_nowait()

    async def _receive_forever(self) -> None:
        tx, bit = self.dut.tx, self.bit_ns
        while True:
            await FallingEdge(tx)
            await Timer(bit // 2, unit="ns")
            if int(tx.value):
                continue                        # a glitch, not a start bit
            byte = 0
            for i in range(8):
                await Timer(bit, unit="ns")
                byte |= int(tx.value) << i
            await Timer(bit, unit="ns")
            self._received.put_nowait(byte if int(tx.value) else _FRAMING_ERROR)
