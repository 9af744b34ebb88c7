"""The simulation harness: :mod:`.rtlsim` builds the Verilated chip around
``hdl/sim_top.v`` and runs jobs on it through cocotb, whose test module is
:mod:`.cocotb_entry`."""
