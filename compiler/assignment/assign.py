"""Assignment by cost and benefit (seed 003; docs/assignment.md, step 5).

For operation i and processor j: cost ``c = t + a`` (the transfer of the operands
that live on another processor, and the execution time), benefit ``p = s + o`` (the
speed-up over the host, ``log2`` of the host's cost over j's, and the complexity
reduction: arithmetic j does in dedicated int8 hardware that the host does in
float). j takes i when ``p >= th1`` and ``c <= th2``; else i is tried fused with a
predecessor on j (no transfer, the pair's speed-up); else the next processor; when
none passes, the least cost wins. The processors are tried in the order ``ORDER``:
the chip, its management core, the host."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from systolica.compiler.assignment.library import Library
from systolica.compiler.assignment.operations import Operation
from systolica.compiler.assignment.processors import ORDER, PROCESSORS
from systolica.compiler.errors import CompileError

#: The complexity reduction of running an operation's arithmetic in the chip's int8
#: datapath rather than in float on the host: multiplies count 1, additions and
#: comparisons 1/2, moving data 0 (the seed's "a multiply is more complex than an
#: add; a float multiply more than an integer one").
COMPLEXITY = {"conv": 1.0, "dense": 1.0, "add": 0.5, "max_pool": 0.5, "avg_pool": 0.5,
              "global_avg_pool": 0.5, "concat": 0.0, "move": 0.0}


@dataclass(frozen=True)
class Thresholds:
    benefit: float = 0.0            # th1: p(i, j) >= th1
    cost: float = math.inf          # th2: c(i, j) <= th2, seconds


@dataclass
class Score:
    t: float
    a: float
    s: float
    o: float

    @property
    def cost(self) -> float:
        return self.t + self.a

    @property
    def benefit(self) -> float:
        return self.s + self.o


@dataclass
class Placement:
    op: Operation
    processor: str
    why: str                                    # the rule that placed it
    scores: dict[str, Score] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)   # processor -> reason


def assign(ops: list[Operation], proto, lib: Library, *,
           thresholds: Thresholds = Thresholds(),
           overrides: Mapping[str, str] | None = None,
           refused: Mapping[int, str] | None = None) -> list[Placement]:
    """Each operation's processor, in the operations' order. `overrides`: the user's
    processor by operation name; `refused`: operations the chip turned down when
    their segment was imported (index -> reason)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - {op.name for op in ops})
    if unknown:
        raise CompileError(f"--assign names no operation of the model: {unknown}; its "
                           f"operations are named by their compute nodes, e.g. "
                           f"{[op.name for op in ops[:3]]}")
    placed: list[Placement] = []
    where: dict[int, str] = {}
    for op in ops:
        refusals = {}
        for name in ORDER:
            if name == "chip" and refused and op.index in refused:
                refusals[name] = refused[op.index]
                continue
            if name == "core" and "core" not in lib.kinds:
                refusals[name] = lib.no_core or f"chip {lib.chip} has no management core"
                continue
            why = PROCESSORS[name].refusal(op, proto)
            if (not why and name == "chip" and PROCESSORS[name].family(op) == "move"
                    and not any(where.get(k) == "chip" for k in op.preds)):
                # a Flatten or a Relu is a view or a clamp of its producer's output
                why = "moves data only: it runs on the chip fused with its producer"
            if why:
                refusals[name] = why
        able = [j for j in ORDER if j not in refusals]
        if not able:
            raise CompileError(f"ONNX node {op.name!r} ({op.kind}) runs on no processor: "
                               + "; ".join(f"{j}: {w}" for j, w in refusals.items()))
        scores = {j: _score(op, j, ops, where, lib) for j in able}
        p = Placement(op, "", "", scores, refusals)
        if op.name in overrides:
            j = overrides[op.name]
            if j not in PROCESSORS:
                raise CompileError(f"--assign {op.name}={j}: the processors are "
                                   f"{', '.join(ORDER)}")
            if j in refusals:
                raise CompileError(f"--assign {op.name}={j}: {j} cannot run it "
                                   f"({refusals[j]})")
            p.processor, p.why = j, "the user's choice"
        else:
            p.processor, p.why = _choose(op, able, scores, ops, where, lib, thresholds)
        where[op.index] = p.processor
        placed.append(p)
    return placed


def _exec(op: Operation, j: str, lib: Library) -> float:
    proc = PROCESSORS[j]
    t = lib.seconds(j, proc.family(op), proc.work(op))
    if j == "host" and op.kind not in ("QuantizeLinear", "DequantizeLinear"):
        # the host's kernel works in float between a dequantise and a quantise
        kinds = {n.op_type for n in op.nodes}
        if "DequantizeLinear" in kinds:
            t += lib.seconds("host", "DequantizeLinear", max(1, op.bytes_in))
        if "QuantizeLinear" in kinds:
            t += lib.seconds("host", "QuantizeLinear", max(1, op.bytes_out))
    return t


def _transfer(op: Operation, j: str, ops, where, lib: Library) -> float:
    """Moving the operands that live elsewhere: onto the chip, its layout change and
    DMA; onto the host, the host's copy, and the chip's layout change back from a
    chip operand; onto the core, nothing from the chip (the core reads the chip's
    DRAM in place, in the chip's layout) and the host's copy into the DRAM from the
    host. The core writes its results in ONNX's layout, so the host only copies them."""
    t = 0.0
    for k in op.preds:
        src = where.get(k)
        if src == j:
            continue
        nbytes = ops[k].bytes_out
        if j == "chip" or (j == "host" and src == "chip"):
            t += lib.transfer_seconds("chip", nbytes)
        if j == "host" or (j == "core" and src == "host"):
            t += lib.transfer_seconds("host", nbytes)
    if not op.preds and j == "chip":          # a graph input comes from the host
        t += lib.transfer_seconds("chip", op.bytes_in)
    if not op.preds and j == "core":          # written into the DRAM by the host
        t += lib.transfer_seconds("host", op.bytes_in)
    return t


def _score(op, j, ops, where, lib) -> Score:
    a = _exec(op, j, lib)
    t = _transfer(op, j, ops, where, lib)
    host = _exec(op, "host", lib) + _transfer(op, "host", ops, where, lib)
    s = math.log2(host / max(t + a, 1e-12)) if j != "host" else 0.0
    o = COMPLEXITY.get(PROCESSORS[j].family(op), 0.0) if j == "chip" else 0.0
    return Score(t, a, s, o)


def _choose(op, able, scores, ops, where, lib, th: Thresholds) -> tuple[str, str]:
    for j in able:
        sc = scores[j]
        if sc.benefit >= th.benefit and sc.cost <= th.cost:
            return j, f"benefit {sc.benefit:.2f} >= {th.benefit:g}, cost within th2"
        fused = [k for k in op.preds if where.get(k) == j]
        if fused:
            k = fused[0]
            a = sc.a
            pair_host = _exec(ops[k], "host", lib) + _exec(op, "host", lib)
            pair_j = _exec(ops[k], j, lib) + a
            s = math.log2(pair_host / max(pair_j, 1e-12)) if j != "host" else 0.0
            if s + sc.o >= th.benefit and a <= th.cost:
                return j, f"fused with {ops[k].name!r} (pair benefit {s + sc.o:.2f})"
    j = min(able, key=lambda j: scores[j].cost)
    return j, "no processor passed the thresholds: least cost"
