"""Systolica: a tiled systolic int8 accelerator, its compiler, and its verification.

The package is layered:

* :mod:`systolica.arch` -- facts about the chip that every side reads: the
  configuration, the instruction set, timing, the fabric's multiplexers, the register
  map;
* :mod:`systolica.rtl` -- the chip in Amaranth; :mod:`systolica.compiler` -- networks
  to scheduled programs; :mod:`systolica.golden` -- the reference model of the
  instruction set; :mod:`systolica.firmware` -- the driver;
* :mod:`systolica.sim` -- the simulation harness (Verilator through cocotb);
* :mod:`systolica.app` -- the applications: command line, demo, flows, reports.
"""
