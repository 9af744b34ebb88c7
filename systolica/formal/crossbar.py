"""The bank crossbars' property (``rtl/cbuf.py``, docs/contract.md "CBUF banks" and
"ACC banks"): ``conflict`` is high in a cycle exactly when two client ports use the
same port of one bank in it.

The harness drives every client port of the chip's CBUF and ACC crossbars (as
``rtl/chip.py`` builds them) with free enables, addresses and bank masks, and works
out the reference from the contract's words: a row port uses the read (write) port of
bank ``addr // bank_rows`` while enabled, a partitioned read the banks its mask
claims; two clients on one bank's port are a conflict. With the sequencer's property
(a conflict in cycle ``c`` faults ``BANK_CONFLICT`` in ``c + 1``, :mod:`.sequencer`)
this is "two clients at one port always fault".
"""

from __future__ import annotations

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cat

from systolica.arch.config import ChipConfig
from systolica.formal.runner import Harness, Mutation
from systolica.rtl.cbuf import Acc, Cbuf

#: Logic whose removal the proof must notice.
MUTATIONS = {
    "write-conflict-ignored": Mutation("write-conflict-ignored", "cbuf.write_conflict", 0,
                                       "two writers on one CBUF bank's write port pass"),
    "acc-read-conflict-ignored": Mutation("acc-read-conflict-ignored", "acc.read_conflict",
                                          0, "two readers on one ACC bank's read port pass"),
}


class CrossbarHarness(Harness):
    """The CBUF and ACC crossbars of ``cfg`` with the clients ``rtl/chip.py`` gives
    them, free client ports, and the reference's assertions."""

    def __init__(self, *, cfg: ChipConfig):
        super().__init__()
        self.cfg = cfg
        lanes = cfg.general_lanes
        self.cbuf = Cbuf(cfg=cfg, row_reads=3 + lanes, part_reads=1, row_writes=4 + lanes)
        self.acc = Acc(cfg=cfg, row_reads=3, row_writes=3)

    def elaborate(self, platform):
        m = self.module()
        m.submodules.cbuf, m.submodules.acc = self.cbuf, self.acc
        cfg = self.cfg
        for buf, banks, bank_rows in ((self.cbuf, cfg.cbuf_physical_banks, cfg.cbuf_bank_rows),
                                      (self.acc, cfg.acc_banks, cfg.acc_bank_rows)):
            part_read = list(getattr(buf, "part_read", []))
            for port in [*buf.row_read, *buf.row_write]:
                m.d.comb += [port.en.eq(AnySeq(1)), port.addr.eq(AnySeq(len(port.addr)))]
            for port in part_read:
                m.d.comb += [port.en.eq(AnySeq(1)), port.banks.eq(AnySeq(len(port.banks)))]
                m.d.comb += [addr.eq(AnySeq(len(addr))) for addr in port.addr]
            for port in buf.row_write:
                m.d.comb += port.data.eq(AnySeq(len(port.data)))

            def row_claims(port, bank_rows=bank_rows, banks=banks):
                return [port.en & (port.addr // bank_rows == b) for b in range(banks)]

            reads = ([row_claims(p) for p in buf.row_read]
                     + [[p.en & p.banks[b] for b in range(banks)] for p in part_read])
            writes = [row_claims(p) for p in buf.row_write]
            clashes = []
            for claims in (reads, writes):
                for i in range(len(claims)):
                    for j in range(i + 1, len(claims)):
                        clashes += [claims[i][b] & claims[j][b] for b in range(banks)]
            expected = Cat(*clashes).any()
            m.d.comb += Assert(buf.conflict == expected)
        return m
