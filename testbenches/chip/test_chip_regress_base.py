"""Long runs on the ``base`` preset (16x16 array), selected by ``make regress``: the
benchmark GEMMs and odd shapes, bit-exact against numpy and the golden model, cycle
counts equal to the prediction."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.app.demo import calibrate, mlp
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network, gemm
from systolica.compiler.graph import reference
from systolica.models.zoo import bottleneck_block

from chip_runs import run_many_on_rtl

pytestmark = [pytest.mark.regress, pytest.mark.rtl]
CFG = preset("base")


def _gemm(M, K, N, seed, int32=False):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = rng.integers(-9000, 9000, N, dtype=np.int32)
    if int32:
        return gemm(a, b, c, out_dtype="int32", relu=True, name=f"g{M}x{K}x{N}")
    mult, shift = calibrate(a, b, c)
    return gemm(a, b, c, mult=mult, shift=shift, zp=-7, relu=True, name=f"g{M}x{K}x{N}")


CASES = {
    "gemm_256x256x256": lambda: _gemm(256, 256, 256, 1),
    "gemm_64x64x64": lambda: _gemm(64, 64, 64, 2),
    "gemm_1000x40x33": lambda: _gemm(1000, 40, 33, 3),
    "gemm_77x300x129_int32": lambda: _gemm(77, 300, 129, 4, int32=True),
    "mlp_base": lambda: mlp(batch=64, widths=(256, 128, 64, 10)),
    # longer than the instruction memory (fetched from DRAM), and 2 MiB of weights
    "gemm_128x768x768": lambda: _gemm(128, 768, 768, 5),
    "gemm_16x2048x1000": lambda: _gemm(16, 2048, 1000, 6),
    # a ResNet bottleneck (1x1, 3x3 with stride, 1x1, projection, add, ReLU)
    "resnet_bottleneck_28x28": lambda: bottleneck_block(size=28, cin=64, width=32, stride=2),
    "resnet_bottleneck_14x14": lambda: bottleneck_block(size=14, cin=128, width=64),
}


@pytest.fixture(scope="module")
def runs():
    compiled = {name: compile_network(CFG, make()) for name, make in CASES.items()}
    # only the used words come back (what a run without ranges reads back, too)
    results = run_many_on_rtl(CFG, [dict(program=c, name=n, readback=[(0, c.dram_map.end)])
                                    for n, c in compiled.items()])
    return {n: (compiled[n], r) for n, r in zip(compiled, results)}


@pytest.mark.parametrize("case", list(CASES))
def test_base_preset(runs, case):
    compiled, res = runs[case]
    assert res.error_name == "NONE"
    got = compiled.result(res.readback[0])
    np.testing.assert_array_equal(got, reference.outputs(compiled.network)[
        compiled.graph.outputs[0]])
    gold = golden.run(CFG, Loadable.for_chip(CFG, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    np.testing.assert_array_equal(got, compiled.result(gold.dram))
    assert res.cycles == compiled.predicted_cycles == gold.cycles
