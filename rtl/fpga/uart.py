"""A UART of 8 data bits, no parity, one stop bit, at ``divisor`` clocks per bit."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out


def _check_divisor(divisor, block):
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 4:
        raise TypeError(f"{block} divisor must be an integer of at least 4 clocks per "
                        f"bit, not {divisor!r}")
    return divisor


class UartRx(wiring.Component):
    """Receiver. ``rx`` is the line (asynchronous; synchronised here); ``data`` is a
    stream of the bytes received, each valid for one cycle (there is no back-pressure:
    the reader takes every byte at once); ``error`` pulses instead when a byte's stop
    bit is low (the byte is dropped)."""

    rx: In(1, init=1)
    data: Out(stream.Signature(8, always_ready=True))
    error: Out(1)

    def __init__(self, *, divisor: int):
        self.divisor = _check_divisor(divisor, "UartRx")
        super().__init__()

    def elaborate(self, platform):
        # Idle until the line falls; half a bit later the start bit is checked (a
        # glitch shorter than that is ignored), then each of the 8 data bits and the
        # stop bit is sampled one bit time apart, in the middle of the bit.
        m = Module()
        line = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, line, init=1)
        timer = Signal(range(self.divisor))
        bits = Signal(range(9))
        shift = Signal(8)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                    m.next = "DATA"
                    with m.If(line):
                        m.next = "IDLE"
            with m.State("DATA"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [timer.eq(self.divisor - 1), shift.eq(Cat(shift[1:], line)),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.comb += [self.data.valid.eq(line), self.error.eq(~line)]
                    m.next = "IDLE"
        m.d.comb += self.data.payload.eq(shift)
        return m


class UartTx(wiring.Component):
    """Transmitter: takes a byte from the ``data`` stream whenever it is idle and
    sends it on ``tx``."""

    data: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, *, divisor: int):
        self.divisor = _check_divisor(divisor, "UartTx")
        super().__init__()

    def elaborate(self, platform):
        # A 10-bit frame (start, 8 data bits LSB first, stop) shifts out one bit per
        # bit time; the stream is ready once the last bit's time is over.
        m = Module()
        timer = Signal(range(self.divisor))
        left = Signal(range(11))
        frame = Signal(10, init=0x3FF)
        m.d.comb += [self.tx.eq(frame[0]), self.data.ready.eq(left == 0)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [frame.eq(Cat(0, self.data.payload, 1)), left.eq(10),
                         timer.eq(self.divisor - 1)]
        with m.Elif(left != 0):
            m.d.sync += timer.eq(timer - 1)
            with m.If(timer == 0):
                m.d.sync += [frame.eq(Cat(frame[1:], 1)), left.eq(left - 1),
                             timer.eq(self.divisor - 1)]
        return m
