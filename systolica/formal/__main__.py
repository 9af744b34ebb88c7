"""Run one formal property set by hand (docs/formal.md):

    python -m systolica.formal sequencer [--depth N] [--mutation NAME] [--out DIR]

Exit 0 if it is proved for the bound, 1 if it fails (the counterexample's VCD is
named), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from systolica.formal import PROPERTIES, formal_config
from systolica.formal.runner import SOLVERS, FormalError, prove


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systolica.formal",
                                     description="Bounded proof of one property set.")
    parser.add_argument("property", choices=sorted(PROPERTIES))
    parser.add_argument("--depth", type=int, help="cycles from reset (default: the "
                        "make-regress bound)")
    parser.add_argument("--mutation", action="append", default=[],
                        help="apply this mutation (the proof must then fail); repeatable")
    parser.add_argument("--solver", choices=sorted(SOLVERS),
                        help="the SMT solver (default: the property's, docs/formal.md)")
    parser.add_argument("--out", type=Path, default=Path("build/formal"))
    args = parser.parse_args(argv)
    prop = PROPERTIES[args.property]
    depth = prop.long if args.depth is None else args.depth
    if depth < 1:
        parser.error(f"--depth must be at least 1 cycle, not {depth}")
    unknown = [name for name in args.mutation if name not in prop.mutations]
    if unknown:
        parser.error(f"{args.property} has no mutation {unknown[0]!r}; it has "
                     f"{', '.join(sorted(prop.mutations))}")
    try:
        proof = prove(prop.harness(formal_config(), depth), name=args.property, depth=depth,
                      out=args.out / args.property,
                      mutations=tuple(prop.mutations[n] for n in args.mutation),
                      solver=args.solver or prop.solver)
    except FormalError as error:
        print(f"systolica.formal: error: {error}", file=sys.stderr)
        return 2
    print(proof.describe())
    return 0 if proof.passed else 1


if __name__ == "__main__":
    sys.exit(main())
