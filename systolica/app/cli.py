"""``systolica``: compile networks, run them on the RTL, benchmark, disassemble."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _gemm_network(M: int, K: int, N: int, seed: int, int32: bool = False):
    from ..compiler import gemm
    from .demo import calibrate
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    bias = rng.integers(-5000, 5000, size=N, dtype=np.int32)
    name = f"gemm_{M}x{K}x{N}"
    if int32:
        return gemm(a, b, bias, out_dtype="int32", name=name)
    mult, shift = calibrate(a, b, bias)
    return gemm(a, b, bias, mult=mult, shift=shift, name=name)


def _shape(text: str) -> tuple[int, int, int]:
    try:
        m, k, n = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MxKxN (e.g. 64x64x64), not {text!r}")
    return m, k, n


def _ensure_built(cfg, waves: bool = False) -> None:
    """Build the Verilated chip with a visible status (the first build of a
    configuration takes a minute or more; later ones reuse it)."""
    from rich.console import Console

    from ..sim import rtlsim
    with Console(stderr=True).status(f"Verilating the {cfg.name} chip (once per "
                                     f"configuration)..."):
        rtlsim.build(cfg, waves=waves)


def cmd_sim(args) -> int:
    from . import demo, flow, report
    from ..arch.config import preset
    cfg = preset(args.config)
    net = demo.mlp() if args.gemm is None else _gemm_network(*args.gemm, seed=args.seed)
    _ensure_built(cfg, args.waves)
    run = flow.run_network(cfg, net, waves=args.waves)
    report.print_run(run)
    _write_trace(args.trace, run.compiled)
    return 0 if run.ok else 1


def _write_trace(path: str | None, compiled) -> None:
    """The compiled program's timeline as Chrome trace / Perfetto JSON."""
    if not path:
        return
    from ..compiler import trace
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    trace.write_trace(path, trace.chip_events(compiled.cfg, compiled.program))
    print(f"schedule timeline: {path} (open in https://ui.perfetto.dev or chrome://tracing)")


def cmd_bench(args) -> int:
    from rich.progress import Progress

    from . import demo, flow, report
    from ..sim import rtlsim
    from ..arch.config import preset
    cases = [("gemm_256x256x256", "base", lambda: _gemm_network(256, 256, 256, 1)),
             ("gemm_64x64x64", "base", lambda: _gemm_network(64, 64, 64, 2)),
             ("demo_mlp", "tiny", demo.mlp)]
    records = []
    with Progress() as progress:
        task = progress.add_task("bench", total=len(cases))
        for name, cfg_name, make in cases:
            progress.update(task, description=f"{name} on {cfg_name}: building the chip")
            rtlsim.build(preset(cfg_name))
            progress.update(task, description=f"{name} on {cfg_name}: running")
            run = flow.run_network(preset(cfg_name), make())
            records.append(report.record(run, name))
            progress.advance(task)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=2) + "\n")
    for r in records:
        print(f"{r['name']:>18} on {r['config']:<5} cycles {r['cycles']:>7} "
              f"(predicted {r['predicted_cycles']}) util {r['mac_utilization']:.3f} "
              f"DRAM {r['dram_bytes']} B  sim {r['sim_cycles_per_second']:,.0f} cycles/s  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
    print(f"wrote {out}")
    return 0 if all(r["ok"] for r in records) else 1


def cmd_compile(args) -> int:
    from ..compiler import compile_network
    from ..arch.config import preset
    cfg = preset(args.config)
    compiled = compile_network(cfg, _gemm_network(*args.gemm, seed=args.seed,
                                                  int32=args.int32))
    if args.out:
        Path(args.out).write_bytes(compiled.image)
    _write_trace(args.trace, compiled)
    print(compiled.disassemble() if args.listing else
          f"{len(compiled.program)} instructions, {compiled.predicted_cycles} cycles predicted, "
          f"MAC utilisation {compiled.utilisation:.3f}")
    return 0


def cmd_disasm(args) -> int:
    from ..arch import isa
    print(isa.disassemble(Path(args.image).read_bytes()))
    return 0


def cmd_schedule(args) -> int:
    from ..compiler import stp, trace
    from ..arch.config import preset
    cfg = preset(args.config)
    result = stp.compile_file(cfg, args.file, insert_delays=args.insert_delays)
    if args.image:
        if result.chip is None:
            raise stp.CompileError(f"{args.file} has no chip statements to put in an image")
        Path(args.image).write_bytes(result.chip.image)
    if args.trace:
        trace.write_trace(args.trace, result.events(cfg))
    print(trace.listing(result.rows(cfg)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="systolica", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("sim", help="compile the demo network, run it on the RTL, report")
    p.add_argument("--config", default="tiny")
    p.add_argument("--gemm", type=_shape, help="run one MxKxN int8 GEMM instead of the demo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--waves", action="store_true", help="write an FST waveform of the run")
    p.add_argument("--trace", default="build/schedule.json",
                   help="write the schedule timeline (Chrome trace / Perfetto JSON) here")
    p.set_defaults(func=cmd_sim)
    p = sub.add_parser("bench", help="benchmark GEMMs and the demo; write JSON records")
    p.add_argument("--out", default="build/bench.json")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("compile", help="compile a random MxKxN GEMM; print or save it")
    p.add_argument("--gemm", type=_shape, required=True)
    p.add_argument("--config", default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--int32", action="store_true", help="int32 output, no requantisation")
    p.add_argument("--out", help="write the program image here")
    p.add_argument("--listing", action="store_true", help="print the disassembly")
    p.add_argument("--trace", help="write the schedule timeline (Chrome trace JSON) here")
    p.set_defaults(func=cmd_compile)
    p = sub.add_parser("disasm", help="disassemble a program image")
    p.add_argument("image")
    p.set_defaults(func=cmd_disasm)
    p = sub.add_parser("schedule", help="schedule a .stp program; print the listing")
    p.add_argument("file", help="program text (.stp), see docs/scheduling.md")
    p.add_argument("--config", default="tiny")
    p.add_argument("--insert-delays", action="store_true",
                   help="add delay registers where two paths differ in latency")
    p.add_argument("--trace", help="write Chrome trace / Perfetto JSON here")
    p.add_argument("--image", help="write the chip statements' program image here")
    p.set_defaults(func=cmd_schedule)
    args = parser.parse_args(argv)

    from ..compiler import CompileError
    from ..arch.config import ConfigError
    from ..arch.isa import EncodingError
    from ..sim.rtlsim import RtlSimError
    try:
        return args.func(args)
    except (CompileError, ConfigError, EncodingError, RtlSimError, OSError) as exc:
        print(f"systolica {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
