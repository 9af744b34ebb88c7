"""The convolution buffer: per partition (one byte of every row) ``cfg.cbuf_banks``
memories of ``cfg.cbuf_bank_rows`` rows, each with one read and one write port, and
the crossbar that connects the units' ports to them (docs/contract.md, "CBUF
banks"). One memory per partition lets the matmul unit's window walk read every
partition at its own address (a packed convolution reads a different kernel tap in
each); every other port addresses all partitions at once."""

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import Out

from systolica.arch.config import ChipConfig

from .ports import buffer_read, buffer_write, check_config, partitioned_read


class Cbuf(wiring.Component):
    """The banked CBUF behind a crossbar.

    Members (the buffer's side of each port, so a unit's ``In(buffer_read(...))``
    connects straight to one): ``row_read`` (``row_reads`` ports addressing a whole
    row), ``part_read`` (``part_reads`` ports with one address per partition and
    the mask of banks they claim, :func:`~.ports.partitioned_read`), ``row_write``
    (``row_writes`` ports), and ``conflict``: two clients use the same port (read,
    or write) of one bank in this cycle (combinational; the sequencer faults on it).
    """

    def __init__(self, *, cfg: ChipConfig, row_reads: int, part_reads: int,
                 row_writes: int):
        self.cfg = check_config(cfg, "Cbuf")
        for name, count in (("row_reads", row_reads), ("part_reads", part_reads),
                            ("row_writes", row_writes)):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise TypeError(f"Cbuf {name} must be a non-negative integer, "
                                f"not {count!r}")
        self.row_reads, self.part_reads, self.row_writes = row_reads, part_reads, row_writes
        super().__init__({
            "row_read": Out(buffer_read(cfg, "cbuf")).array(row_reads),
            "part_read": Out(partitioned_read(cfg)).array(part_reads),
            "row_write": Out(buffer_write(cfg, "cbuf")).array(row_writes),
            "conflict": Out(1),
        })

    def elaborate(self, platform):
        # Bank b of partition p is memory (p, b). In every cycle each client port
        # claims banks: a row port the bank of its address while ``en``, a partitioned
        # read its ``banks`` mask while ``en``. A bank's read (write) port takes the
        # address (and data) of the client claiming it; the clients' claims are the
        # same in every partition, so one claim vector per bank decides all of them,
        # and two claims on one port of one bank are a conflict. A client's read data
        # comes, per partition, from the bank its address was in, chosen by a select
        # registered with the address (the memories answer one cycle later).
        m = Module()
        cfg = self.cfg
        banks, rows, shift = cfg.cbuf_banks, cfg.rows, cfg.cbuf_bank_shift
        low = slice(0, shift)              # row within its bank
        high = slice(shift, None)          # the bank

        mems = [[memory.Memory(shape=8, depth=cfg.cbuf_bank_rows, init=[])
                 for _ in range(banks)] for _ in range(rows)]
        for p in range(rows):
            for b in range(banks):
                m.submodules[f"cbuf_p{p}_b{b}"] = mems[p][b]
        rd = [[mem.read_port() for mem in per_p] for per_p in mems]
        wr = [[mem.write_port() for mem in per_p] for per_p in mems]

        # Claims, per client and bank.
        def claims(port):
            return [port.en & (port.addr[high] == b) for b in range(banks)]

        read_claims = ([claims(port) for port in self.row_read]
                       + [[port.en & port.banks[b] for b in range(banks)]
                          for port in self.part_read])
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

        m.d.comb += self.conflict.eq(Cat(*clash(read_claims), *clash(write_claims)).any())

        # Read ports: per partition the address a client gives that partition; later
        # clients win a conflict (the chip faults then, so any choice will do).
        read_addrs = ([[port.addr] * rows for port in self.row_read]
                      + [[port.addr[p] for p in range(rows)] for port in self.part_read])
        for b in range(banks):
            en_b = Cat(*(c[b] for c in read_claims)).any() if read_claims else 0
            for p in range(rows):
                m.d.comb += rd[p][b].en.eq(en_b)
                for c, addrs in zip(read_claims, read_addrs):
                    with m.If(c[b]):
                        m.d.comb += rd[p][b].addr.eq(addrs[p][low])

        # Read data: the select (bank of the address) registered with the address.
        def bank_data(p, sel):
            return Array(rd[p][b].data for b in range(banks))[sel]

        for k, port in enumerate(self.row_read):
            sel = Signal(range(banks), name=f"row_read_{k}_bank")
            m.d.sync += sel.eq(port.addr[high])
            m.d.comb += port.data.eq(Cat(*(bank_data(p, sel) for p in range(rows))))
        for k, port in enumerate(self.part_read):
            data = []
            for p in range(rows):
                sel = Signal(range(banks), name=f"part_read_{k}_bank_{p}")
                m.d.sync += sel.eq(port.addr[p][high])
                data.append(bank_data(p, sel))
            m.d.comb += port.data.eq(Cat(*data))

        # Write ports: the claiming writer's address and byte.
        for b in range(banks):
            en_b = Cat(*(c[b] for c in write_claims)).any() if write_claims else 0
            for p in range(rows):
                m.d.comb += wr[p][b].en.eq(en_b)
                for c, port in zip(write_claims, self.row_write):
                    with m.If(c[b]):
                        m.d.comb += [wr[p][b].addr.eq(port.addr[low]),
                                     wr[p][b].data.eq(port.data[8 * p:8 * p + 8])]
        return m
