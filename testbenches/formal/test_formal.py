"""The formal property sets (``systolica/formal``, docs/formal.md): each holds for
its bound from reset, and each mutation of the logic it checks makes it fail with a
counterexample trace.

``make test`` proves each set for its short bound with its first mutation
(``fpga``: these run yosys and the solver from the fpga extra); ``make regress``
proves the real bound and every mutation. The checks of the arguments need no tool.
"""

from __future__ import annotations

import pytest
from amaranth.hdl import Fragment

from systolica.formal import PROPERTIES, formal_config, sequencer
from systolica.formal.__main__ import main
from systolica.formal.runner import Harness, Mutation, prove, prove_variants


def _check(name: str, depth: int, mutations: list[str], out):
    prop = PROPERTIES[name]
    variants = {"": ()} | {m: (prop.mutations[m],) for m in mutations}
    proofs = prove_variants(prop.harness(formal_config(), depth), name=name, depth=depth,
                            out=out, variants=variants, solver=prop.solver)
    held = proofs.pop("")
    assert held.passed, held.describe()
    for mutation, proof in proofs.items():
        assert not proof.passed, (f"{name} still holds with {mutation} "
                                  f"({prop.mutations[mutation].what})")
        assert proof.failed and proof.trace.read_text().startswith("$")
    return held


@pytest.mark.fpga
@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_each_property_holds_for_its_short_bound_and_a_mutation_breaks_it(name, tmp_path):
    prop = PROPERTIES[name]
    _check(name, prop.short, list(prop.mutations)[:1], tmp_path)


@pytest.mark.regress
@pytest.mark.fpga
@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_each_property_holds_for_its_bound_and_every_mutation_breaks_it(name, tmp_path):
    prop = PROPERTIES[name]
    held = _check(name, prop.long, list(prop.mutations), tmp_path)
    print(held.describe())


def test_every_property_has_a_mutation_and_a_longer_regression_bound():
    for prop in PROPERTIES.values():
        assert prop.mutations and 1 <= prop.short <= prop.long, prop.name


class _Idle(Harness):
    """A harness with nothing in it, elaborated (so used) once the test is over."""

    def elaborate(self, platform):
        return self.module()


@pytest.fixture
def idle():
    harness = _Idle()
    yield harness
    Fragment.get(harness, None)


@pytest.mark.parametrize("depth", [0, -1, 2.5, True])
def test_a_bound_that_is_not_a_positive_number_of_cycles_is_refused(depth, idle, tmp_path):
    with pytest.raises(ValueError, match="depth must be a positive number of cycles"):
        prove(idle, name="idle", depth=depth, out=tmp_path)


def test_an_unknown_solver_is_refused_by_name(idle, tmp_path):
    with pytest.raises(ValueError, match="solver must be one of"):
        prove(idle, name="idle", depth=1, out=tmp_path, solver="z3")


def test_a_mutation_ties_its_signal_to_a_constant_of_its_width():
    assert Mutation("m", "seq.ready", 1, "gone").commands() == [
        "connect -set \\seq.ready  1'd1 top"]


@pytest.mark.parametrize("argv, words", [
    (["sequencer", "--mutation", "no-such"], "sequencer has no mutation 'no-such'"),
    (["crossbar", "--depth", "0"], "--depth must be at least 1 cycle"),
    (["no-such"], "invalid choice"),
])
def test_the_command_line_refuses_a_bad_request_with_exit_2(argv, words, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.regress
@pytest.mark.fpga
def test_the_guard_holds_with_the_webassembly_boolector_too(tmp_path):
    prop = PROPERTIES["mux_guard"]
    proof = prove(prop.harness(formal_config(), prop.short), name=prop.name,
                  depth=prop.short, out=tmp_path, solver="boolector")
    assert proof.passed, proof.describe()


@pytest.mark.regress
@pytest.mark.fpga
def test_the_sequencer_holds_against_its_own_legality_and_setcfg_checks(tmp_path):
    """The reference works out legality, the SETCFG range and the update limits of the
    head's word itself; only the address ranges (products of 16-bit fields) come from
    the sequencer's registers. Six cycles, about a minute."""
    harness = sequencer.SequencerHarness(cfg=formal_config(), probed=("in_range",))
    proof = prove(harness, name="sequencer", depth=6, out=tmp_path,
                  solver=PROPERTIES["sequencer"].solver)
    assert proof.passed, proof.describe()
