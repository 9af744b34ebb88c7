"""Every program the bench compiles, and the programs of a fixed list of networks
(ResNet-50 per strategy, the demo networks, the seed-001 chains, the transposes, the
splits, the ONNX models, the CNN and chain test cases), each reduced to hashes of
what the chip is given: the program image, the DRAM image, the program address, the
UBUF registers and the predicted cycles.

``test_program_hashes`` compares them with ``golden/program_hashes.json``: a change
to the compiler that is meant to change no program shows there as no change at all,
and one that is meant to shows which programs moved (``--update-golden`` rewrites
the file, for review in the diff)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from systolica.arch import isa
from systolica.arch.config import preset


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], dict]      # -> the census record
    heavy: bool = False           # a compile of tens of seconds (ResNet-50)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def _dram_hash(dram: np.ndarray) -> str:
    dram = np.ascontiguousarray(dram)
    return _sha(repr((dram.shape, str(dram.dtype))).encode() + dram.tobytes())


def compiled_record(compiled) -> dict:
    return {"image": _sha(compiled.image), "dram": _dram_hash(compiled.dram),
            "prog_addr": int(compiled.prog_addr), "ubuf": list(map(int, compiled.ubuf)),
            "instructions": len(compiled.program),
            "predicted_cycles": int(compiled.predicted_cycles)}


def program_record(program: list[isa.Instr], dram: np.ndarray | None = None) -> dict:
    out = {"image": _sha(isa.to_bytes([isa.encode(i) for i in program])),
           "instructions": len(program), "last_cycle": int(program[-1].cycle)}
    if dram is not None:
        out["dram"] = _dram_hash(dram)
    return out


def _compile(cfg_name: str, make, **options) -> Callable[[], dict]:
    def run() -> dict:
        from systolica.compiler import CompileError, compile_network
        try:
            return compiled_record(compile_network(preset(cfg_name), make(), **options))
        except CompileError as e:       # a refusal is part of the behaviour too
            return {"refused": str(e)}
    return run


def _bench() -> list[Case]:
    from systolica.app import bench_cases
    out = []
    for c in bench_cases.cases():
        if c.harness != "cocotb":       # the same program again under the C++ harness
            continue
        opts = "".join(f"_{k}={v}" for k, v in sorted(c.options.items()))
        out.append(Case(f"bench/{c.name}@{c.config}{opts}", _compile(c.config, c.make,
                                                                     **c.options)))
    return out


def _chain_bench() -> list[Case]:
    from systolica.app import chain_bench
    return [Case(f"chain_bench/{chain.name}@{cfg}/{strategy}",
                 _compile(cfg, chain.make, chain=choice))
            for chain, cfg, strategy, choice in chain_bench.runs()]


def _transposes() -> list[Case]:
    from systolica.app import transpose_bench as tb

    def shapes() -> dict:
        cfg = preset(tb.CONFIG)
        rng = np.random.default_rng(4)
        out = {}
        for M, N in tb.SHAPES:
            x = rng.integers(-128, 128, (M, N), dtype=np.int8)
            progs, image, span = tb.programs(cfg, x)
            for name, program in progs.items():
                out[f"{M}x{N}/{name}"] = program_record(program, image)
            out[f"{M}x{N}/span"] = list(span)
        return out

    def nd() -> dict:
        cfg = preset(tb.CONFIG)
        rng = np.random.default_rng(5)
        out = {}
        for shape, perm in tb.ND_CASES:
            x = rng.integers(-128, 128, shape, dtype=np.int8)
            jobs, compiled = tb.nd_programs(cfg, x, perm)
            key = f"{'x'.join(map(str, shape))}/{''.join(map(str, perm))}"
            out[key] = compiled_record(compiled)
            out[f"{key}/round_trip"] = _sha(jobs["dram_round_trip"].program.image)
        return out

    def int32() -> dict:
        from systolica.compiler import compile_network
        cfg = preset(tb.CONFIG)
        return {g.name: compiled_record(compile_network(cfg, g))
                for g in tb.int32_graphs(*tb.INT32_CASE)}

    return [Case("transpose_bench/shapes", shapes), Case("transpose_bench/nd", nd),
            Case("transpose_bench/int32", int32)]


def _routes() -> list[Case]:
    from systolica.app import route_bench as rb

    def run() -> dict:
        out = {}
        for name, moves, col0 in rb.SKIP_CASES:
            cfg = preset(name)
            for skips in (False, True):
                _, _, prog = rb.program(cfg, moves, col0, skips, rows=256)
                out[f"{name}/skips={skips}"] = program_record(prog, rb.dram(cfg, 5, 256))
        return out
    return [Case("route_bench/skips", run)]


def _resnet50() -> list[Case]:
    from systolica.app import cnn_bench
    from systolica.models import zoo as models
    cfg = preset("base")
    runs = [(suffix, options) for suffix, _, options in cnn_bench.RESNET50_STRATEGIES]
    runs += [("_cost_model", {}),
             ("_cost_model_chip_ubuf", {"ubuf": (cfg.ubuf_base, cfg.ubuf_rows)})]
    return [Case(f"resnet50/224{suffix}", _compile("base", models.resnet50, **options),
                 heavy=True) for suffix, options in runs]


def _chain_examples() -> list[Case]:
    from systolica.app.cli import CHAIN_EXAMPLES
    from systolica.compiler.lowering.chain import STRATEGIES, ChainChoice
    from systolica.models import chain_cases
    out = []
    for example, (builder, per) in CHAIN_EXAMPLES.items():
        make = getattr(chain_cases, builder)
        for strategy in STRATEGIES:
            out.append(Case(f"chain_example/{example}/{strategy}",
                            _compile("tiny", make, chain=ChainChoice(strategy, per))))
        out.append(Case(f"chain_example/{example}/cost_model", _compile("tiny", make)))
    for seed in range(6):
        for strategy in STRATEGIES:
            out.append(Case(f"random_chain/{seed}/{strategy}",
                            _compile("tiny", lambda seed=seed: chain_cases.random_chain(seed),
                                     chain=ChainChoice(strategy, None))))
    return out


def _cnn_cases() -> list[Case]:
    from systolica.models import cnn_cases
    makers = [*[(f"conv_case_{s}", lambda s=s: cnn_cases.conv_case(s)) for s in range(6)],
              *[(f"pool_case_{s}", lambda s=s: cnn_cases.pool_case(s)) for s in range(3)],
              *[(f"add_case_{s}", lambda s=s: cnn_cases.add_case(s)) for s in range(3)],
              ("large_conv_case_0", lambda: cnn_cases.large_conv_case(0)),
              ("flatten_case_0", lambda: cnn_cases.flatten_case(0)),
              *[(f"residual_chain_case_{s}", lambda s=s: cnn_cases.residual_chain_case(s))
                for s in range(3)],
              ("wide_maps_case_0", lambda: cnn_cases.wide_maps_case(0))]
    return [Case(f"cnn_case/{name}@{cfg}", _compile(cfg, make))
            for name, make in makers for cfg in ("tiny", "tiny_tall", "tiny_wide", "tiny_2x3")]


def _models() -> list[Case]:
    from systolica.app import demo
    from systolica.models import zoo as models
    makers = [("small_cnn", models.small_cnn),
              ("bottleneck_block", models.bottleneck_block),
              ("branches", lambda: models.branches(96, (4, 6, 5), 3)),
              ("branches_separate", lambda: models.branches(96, (4, 6, 5), 3, joined=False)),
              ("inception_block", models.inception_block),
              ("inverted_residual_block", models.inverted_residual_block),
              ("resnet50_32", lambda: models.resnet50(size=32)),
              ("demo_mlp", demo.mlp), ("demo_cnn", demo.cnn), ("demo_concat", demo.concat)]
    return [Case(f"model/{name}@{cfg}", _compile(cfg, make))
            for name, make in makers for cfg in ("tiny", "tiny_tall", "tiny_wide", "base")]


def _onnx() -> list[Case]:
    def load(build, name, quantise=None):
        def make():
            from systolica.compiler.frontend import onnx_import
            from systolica.models import onnx_zoo as onnx_models
            model = getattr(onnx_models, build)()
            if quantise is not None:
                model = onnx_models.ort_quantized(model, per_channel=quantise)
            return onnx_import.load(model, name=name)
        return make
    models = [("inception", load("inception", "inception")),
              ("qdq_cnn", load("qdq_cnn", "qdq_cnn")),
              ("qdq_resnet", load("qdq_resnet", "qdq_resnet")),
              *[(f"ort_{b}_{'channel' if pc else 'tensor'}", load(f"float_{b}", f"ort_{b}", pc))
                for b in ("cnn", "lenet", "mlp", "resnet", "mobilenet") for pc in (False, True)]]
    return [Case(f"onnx/{name}@{cfg}", _compile(cfg, make))
            for name, make in models for cfg in ("tiny", "base")]


def _transpose_graphs() -> list[Case]:
    from systolica.compiler import GraphBuilder

    def graph(shape, perm, dense: bool):
        def make():
            rng = np.random.default_rng(sum(shape))
            g = GraphBuilder(f"t_{'x'.join(map(str, shape))}")
            x = g.input(rng.integers(-128, 128, shape, dtype=np.int8), name="x")
            if dense:
                w = rng.integers(-128, 128, (shape[-1], 24), dtype=np.int8)
                x = g.dense(x, w, mult=40, shift=12, name="d")
            g.transpose(x, perm, name="t")
            return g.build()
        return make
    cases = [((40, 24), (1, 0), True), ((33, 17), (1, 0), False),
             ((3, 20, 12), (0, 2, 1), False), ((1, 6, 10, 12), (0, 2, 3, 1), False)]
    return [Case(f"transpose/{'x'.join(map(str, s))}_{''.join(map(str, p))}"
                 f"{'_dense' if d else ''}@{cfg}", _compile(cfg, graph(s, p, d)))
            for s, p, d in cases for cfg in ("tiny", "tiny_tall", "tiny_wide")]


def _program_text() -> list[Case]:
    from pathlib import Path

    from systolica.compiler.frontend import stp, text

    from paths import EXAMPLES as root

    def run(path: Path) -> dict:
        result = stp.compile_program(preset("tiny"), text.parse_file(str(path)),
                                     insert_delays=True)
        return {"image": _sha(result.chip.image)} if result.chip is not None else {
            "rows": [str(r) for r in result.rows(preset("tiny"))]}
    return [Case(f"stp/{p.stem}", lambda p=p: run(p)) for p in sorted(root.glob("*.stp"))]


def cases() -> list[Case]:
    return [*_bench(), *_chain_bench(), *_transposes(), *_routes(), *_chain_examples(),
            *_cnn_cases(), *_models(), *_onnx(), *_transpose_graphs(), *_program_text(),
            *_resnet50()]
