"""Golden listings: the printed programs of a few small networks, one per lowering
(a dense layer pair, a convolution with a pool, a transpose, a seed-001 chain in
passes), with their DRAM map and predicted cycles. A change to what the compiler
emits shows here as a diff to review; ``pytest --update-golden`` rewrites them."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.app.demo import mlp
from systolica.arch.config import preset
from systolica.compiler import CompileOptions, GraphBuilder, compile_network
from systolica.compiler.lowering.chain import ChainChoice
from systolica.models import chain_cases

from golden_files import update_text
from paths import EXPECTED

LISTINGS = EXPECTED / "listings"


def _conv_pool():
    rng = np.random.default_rng(7)
    g = GraphBuilder("conv_pool")
    x = g.input(rng.integers(-128, 128, (1, 6, 6, 3), dtype=np.int8), zero_point=3)
    t = g.conv2d(x, rng.integers(-40, 41, (3, 3, 3, 8), dtype=np.int8),
                 rng.integers(-500, 500, 8, dtype=np.int32), pads=1, mult=181, shift=15,
                 relu=True, name="conv")
    return g.build(g.max_pool2d(t, 2, stride=2, name="pool"))


def _transpose():
    rng = np.random.default_rng(8)
    g = GraphBuilder("transpose_12x20")
    g.transpose(g.input(rng.integers(-128, 128, (12, 20), dtype=np.int8), name="x"),
                name="t")
    return g.build()


#: name -> (chip, network, options)
NETWORKS = {
    "mlp_two_layers": ("tiny", lambda: mlp(batch=6, widths=(12, 10, 5), seed=3,
                                            name="mlp_two_layers"), CompileOptions()),
    "conv_pool": ("tiny", _conv_pool, CompileOptions()),
    "transpose_12x20": ("tiny", _transpose, CompileOptions()),
    "seed001_chain": ("tiny", lambda: chain_cases.seed_two_layer(channels=2),
                      CompileOptions(chain=ChainChoice("crop_fetch", 8))),
}


def listing(name: str) -> str:
    cfg_name, make, options = NETWORKS[name]
    c = compile_network(preset(cfg_name), make(), options)
    head = [f"# {name} on chip {cfg_name}: {len(c.program)} instructions, "
            f"{c.predicted_cycles} cycles predicted, UBUF {c.ubuf}, PROG_ADDR {c.prog_addr}",
            f"# DRAM: inputs {dict(c.dram_map.inputs)}, outputs {dict(c.dram_map.outputs)}"]
    return "\n".join(head + [c.disassemble(), ""])


@pytest.mark.parametrize("name", list(NETWORKS))
def test_listing_is_the_recorded_one(name, update_golden):
    got = listing(name)
    path = LISTINGS / f"{name}.txt"
    if update_golden:
        update_text(path, got)
        return
    assert path.exists(), f"{path} is missing; run pytest --update-golden and review it"
    assert got == path.read_text(), \
        f"{name}: the program differs from {path}; if the change is meant, rerun with " \
        f"--update-golden and review the diff"
