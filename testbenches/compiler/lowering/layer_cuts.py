"""What the tests of layers cut along their width (test_maps_width_cut.py) or their
channels (test_maps_channel_cut.py) share: a chip with a small CBUF that provokes the
cuts cheaply, the grids every case runs on, and the check of a cut layer's run."""

from __future__ import annotations

import numpy as np

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.graph import reference
from systolica.compiler.lowering.lower import lower
from systolica.compiler.lowering.maps.layout import network_layout
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning.map_tiling import estimate_tiling

GRIDS = ["tiny", "tiny_tall", "tiny_wide", "tiny_2x3"]


def small_cbuf(name: str):
    """A preset with a quarter of tiny's CBUF (512 rows of R bytes): a 16-pixel-wide
    map of 64 channels already overflows it, so the cuts are cheap to provoke."""
    cfg = preset(name)
    return cfg.replace(name=f"{name}-cbuf512", cbuf_depth=512, ubuf_base=448, ubuf_rows=64,
                       dram_words=1 << 16)


def chip(grid: str, which: str):
    return small_cbuf(grid) if which == "small" else preset(grid)


def runs(cases) -> list[tuple[str, str]]:
    """Every case on every grid; the fast tier's every fourth takes each case on
    another grid."""
    return [(GRIDS[(k + j) % len(GRIDS)], case) for k, case in enumerate(cases)
            for j in range(len(GRIDS))]


def layer_dram_bytes(cfg, compiled, graph) -> dict[str, int]:
    """The DRAM bytes each layer's DMAs move."""
    names = [n.name for n in graph.nodes]
    moved: dict[str, int] = {}
    for ins, layer in zip(compiled.program, compiled.layer_of):
        if ins.op is Opcode.DMA:
            words = ins.fields["rows"] * (cfg.acc_row_words if ins.fields["kind"] in (
                DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1)
            moved[names[layer]] = moved.get(names[layer], 0) + words * cfg.rows
    return moved


def check_runs(cfg, graph, compiled):
    """Numpy's outputs from the golden model, in the predicted cycles and bytes, and
    the cost model's byte count of each layer the program's."""
    run = golden.run(cfg, compiled.loadable)
    assert run.error.name == "NONE"
    got, want = compiled.results(run.dram), reference.outputs(graph)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert run.cycles == compiled.predicted_cycles
    assert (run.dram_bytes_read, run.dram_bytes_written) == \
        (compiled.dram_bytes_read, compiled.dram_bytes_written)
    lay = network_layout(cfg)
    jobs = lower(cfg, graph, CompileOptions()).jobs
    moved = layer_dram_bytes(cfg, compiled, graph)
    for name, tiling in compiled.tiling.items():
        assert estimate_tiling(cfg, lay, jobs[name], tiling)[1] == moved[name], name
