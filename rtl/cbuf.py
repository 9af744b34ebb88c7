"""The convolution buffer: one byte-wide memory per partition, so the matmul unit's
window walk can read every partition at its own address (a packed convolution reads
a different kernel tap in each). Every other port addresses all partitions at once."""

from amaranth.hdl import Cat, Module
from amaranth.lib import memory

from systolica.arch.config import ChipConfig


def build_cbuf(m: Module, cfg: ChipConfig, *, row_reads, partition_reads, row_writes):
    """Instantiate the CBUF in ``m`` and wire the units' ports to it: ``row_reads``
    and ``row_writes`` address a whole row, ``partition_reads`` one address per
    partition (:func:`~.ports.partitioned_read`)."""
    parts = []
    for p in range(cfg.rows):
        mem = memory.Memory(shape=8, depth=cfg.cbuf_depth, init=[])
        m.submodules[f"cbuf_p{p}"] = mem
        parts.append(mem)
    for port in row_reads:
        data = []
        for mem in parts:
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(port.addr), rp.en.eq(port.en)]
            data.append(rp.data)
        m.d.comb += port.data.eq(Cat(*data))
    for port in partition_reads:
        for p, mem in enumerate(parts):
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(port.addr[p]),
                         port.data[8 * p:8 * p + 8].eq(rp.data)]
    for port in row_writes:
        for p, mem in enumerate(parts):
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(port.addr), wp.en.eq(port.en),
                         wp.data.eq(port.data[8 * p:8 * p + 8])]
