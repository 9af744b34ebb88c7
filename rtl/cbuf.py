"""The banked buffers and their crossbar (docs/contract.md, "CBUF banks" and "ACC
banks"): each buffer's rows are cut into banks by address range, each bank is one
memory per lane with one read and one write port, and a crossbar connects the units'
ports to them.

* :class:`Cbuf`, the convolution buffer: one lane per partition (one byte of every
  row), so ``cfg.rows`` x ``cfg.cbuf_banks`` memories of ``cfg.cbuf_bank_rows`` bytes.
  One memory per partition lets the matmul unit's window walk read every partition
  at its own address (a packed convolution reads a different kernel tap in each);
  every other port addresses all partitions at once.
* :class:`Acc`, the accumulator buffer: one lane of whole rows (``C`` int32), so
  ``cfg.acc_banks`` memories of ``cfg.acc_bank_rows`` rows; every port addresses a
  whole row.

Both are :class:`BankedBuffer`; only the geometry differs.
"""

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.arch.config import ChipConfig
from systolica.rtl.ports import buffer_read, buffer_write, check_config, delayed, partitioned_read


class BankedBuffer(wiring.Component):
    """A buffer (:attr:`buffer`: ``"cbuf"`` or ``"acc"``) of banks behind a crossbar.

    Members (the buffer's side of each port, so a unit's ``In(buffer_read(...))``
    connects straight to one): ``row_read`` (``row_reads`` ports addressing a whole
    row), ``part_read`` (``part_reads`` ports with one address per partition and
    the mask of banks they claim, :func:`~.ports.partitioned_read`; CBUF only),
    ``row_write`` (``row_writes`` ports; on the CBUF each with a ``row_keep`` mask of
    partitions it does not write, 0 unless driven), and ``conflict``: two ports use the same
    port (read, or write) of one bank in this cycle (combinational; the sequencer
    faults on it).

    A buffer is one of its subclasses, which give ``geometry()`` (lanes, bits per
    lane, banks, rows per bank, log2 of rows per bank) and ``memory_name(lane, bank)``.
    """

    buffer: str = ""

    def __init__(self, *, cfg: ChipConfig, row_reads: int, row_writes: int,
                 part_reads: int = 0):
        block = type(self).__name__
        self.cfg = check_config(cfg, block)
        for name, count in (("row_reads", row_reads), ("part_reads", part_reads),
                            ("row_writes", row_writes)):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise TypeError(f"{block} {name} must be a non-negative integer, "
                                f"not {count!r}")
        if part_reads and self.buffer != "cbuf":
            raise TypeError(f"{block} has no partitioned reads (part_reads must be 0, "
                            f"not {part_reads!r})")
        self.row_reads, self.part_reads, self.row_writes = row_reads, part_reads, row_writes
        members = {"row_read": Out(buffer_read(cfg, self.buffer)).array(row_reads)}
        if self.buffer == "cbuf":
            members["part_read"] = Out(partitioned_read(cfg)).array(part_reads)
        members.update({
            "row_write": Out(buffer_write(cfg, self.buffer)).array(row_writes),
            "conflict": Out(1),
        })
        if self.buffer == "cbuf":   # per write port, the partitions it leaves unwritten
            members["row_keep"] = In(cfg.rows).array(row_writes)
        super().__init__(members)

    def elaborate(self, platform):
        # Bank b of lane p is memory (p, b). In every cycle each client port claims
        # banks: a row port the bank of its address while ``en``, a partitioned read
        # its ``banks`` mask while ``en``. A bank's read (write) port takes the address
        # (and data) of the client claiming it; the clients' claims are the same in
        # every lane, so one claim vector per bank decides all of them, and two claims
        # on one port of one bank are a conflict. A client's read data comes, per lane,
        # from the bank its address was in, chosen by a select registered with the
        # address (the memories answer one cycle later).
        m = Module()
        lanes, bits, banks, bank_rows, shift = self.geometry()
        low = slice(0, shift)              # row within its bank
        high = slice(shift, None)          # the bank
        part_read = list(getattr(self, "part_read", []))

        mems = [[memory.Memory(shape=bits, depth=bank_rows, init=[])
                 for _ in range(banks)] for _ in range(lanes)]
        for p in range(lanes):
            for b in range(banks):
                m.submodules[self.memory_name(p, b)] = mems[p][b]
        rd = [[mem.read_port() for mem in per_p] for per_p in mems]
        wr = [[mem.write_port() for mem in per_p] for per_p in mems]

        # Claims, per client and bank.
        def claims(port):
            return [port.en & (port.addr[high] == b) for b in range(banks)]

        read_claims = ([claims(port) for port in self.row_read]
                       + [[port.en & port.banks[b] for b in range(banks)]
                          for port in part_read])
        write_claims = [claims(port) for port in self.row_write]

        def clash(claim_sets):
            """Per bank: at least two of the clients claim it."""
            out = []
            for b in range(banks):
                hits = [c[b] for c in claim_sets]
                pairs = [hits[i] & hits[j] for i in range(len(hits))
                         for j in range(i + 1, len(hits))]
                out.append(Cat(*pairs).any() if pairs else 0)
            return out

        read_conflict = Signal(name="read_conflict")
        write_conflict = Signal(name="write_conflict")
        m.d.comb += [read_conflict.eq(Cat(*clash(read_claims)).any()),
                     write_conflict.eq(Cat(*clash(write_claims)).any()),
                     self.conflict.eq(read_conflict | write_conflict)]

        # Read ports: per lane the address a client gives that lane; later clients win
        # a conflict (the chip faults then, so any choice will do).
        read_addrs = ([[port.addr] * lanes for port in self.row_read]
                      + [[port.addr[p] for p in range(lanes)] for port in part_read])
        for b in range(banks):
            en_b = Cat(*(c[b] for c in read_claims)).any() if read_claims else 0
            for p in range(lanes):
                m.d.comb += rd[p][b].en.eq(en_b)
                for c, addrs in zip(read_claims, read_addrs):
                    with m.If(c[b]):
                        m.d.comb += rd[p][b].addr.eq(addrs[p][low])

        # Read data: the select (bank of the address) registered with the address.
        # With a read latency of 2 each bank's output is registered once more, and
        # the select with it (on the ECP5 yosys keeps that register in the fabric).
        latency = self.cfg.latency[f"{self.buffer}_read"]
        out = [[rd[p][b].data for b in range(banks)] for p in range(lanes)]
        for _ in range(latency - 1):
            regs = [[Signal.like(d, name=f"{self.memory_name(p, b)}_out")
                     for b, d in enumerate(per_p)] for p, per_p in enumerate(out)]
            m.d.sync += [r.eq(d) for rs, ds in zip(regs, out) for r, d in zip(rs, ds)]
            out = regs

        def bank_data(p, sel):
            return Array(out[p])[sel]

        for k, port in enumerate(self.row_read):
            sel = delayed(m, port.addr[high], latency, f"row_read_{k}_bank")
            m.d.comb += port.data.eq(Cat(*(bank_data(p, sel) for p in range(lanes))))
        for k, port in enumerate(part_read):
            data = []
            for p in range(lanes):
                sel = delayed(m, port.addr[p][high], latency, f"part_read_{k}_bank_{p}")
                data.append(bank_data(p, sel))
            m.d.comb += port.data.eq(Cat(*data))

        # Write ports: the claiming writer's address and its lane of the data.
        keep = list(getattr(self, "row_keep", [None] * len(self.row_write)))
        for b in range(banks):
            for p in range(lanes):
                ens = [c[b] if k is None else c[b] & ~k[p]
                       for c, k in zip(write_claims, keep)]
                m.d.comb += wr[p][b].en.eq(Cat(*ens).any() if ens else 0)
                for c, port in zip(write_claims, self.row_write):
                    with m.If(c[b]):
                        m.d.comb += [wr[p][b].addr.eq(port.addr[low]),
                                     wr[p][b].data.eq(port.data[bits * p:bits * (p + 1)])]
        return m


class Cbuf(BankedBuffer):
    """The banked CBUF: per partition ``cfg.cbuf_physical_banks`` byte-wide memories
    of ``cfg.cbuf_bank_rows`` rows (the CBUF's banks, then a UBUF's of its own).
    Members as :class:`BankedBuffer`, with
    ``part_reads`` partitioned readers."""

    buffer = "cbuf"

    def __init__(self, *, cfg: ChipConfig, row_reads: int, part_reads: int,
                 row_writes: int):
        super().__init__(cfg=cfg, row_reads=row_reads, part_reads=part_reads,
                         row_writes=row_writes)

    def geometry(self):
        cfg = self.cfg
        return (cfg.rows, 8, cfg.cbuf_physical_banks, cfg.cbuf_bank_rows,
                cfg.cbuf_bank_shift)

    def memory_name(self, lane, bank):
        return f"cbuf_p{lane}_b{bank}"


class Acc(BankedBuffer):
    """The banked ACC: ``cfg.acc_banks`` memories of ``cfg.acc_bank_rows`` whole rows
    (``C`` int32). Members as :class:`BankedBuffer`, without partitioned readers."""

    buffer = "acc"

    def __init__(self, *, cfg: ChipConfig, row_reads: int, row_writes: int):
        super().__init__(cfg=cfg, row_reads=row_reads, row_writes=row_writes)

    def geometry(self):
        cfg = self.cfg
        return 1, 32 * cfg.cols, cfg.acc_banks, cfg.acc_bank_rows, cfg.acc_bank_shift

    def memory_name(self, lane, bank):
        return f"acc_b{bank}"
