"""Host software for the chip: the register-level driver and its simulation bindings.

:mod:`.driver` speaks to the chip through any register bus; :mod:`.cocotb_bus` is that
bus in a cocotb simulation of ``systolica/sim/hdl/sim_top.v``; :mod:`.dramfile` reads
and writes the DRAM model's hex images.
"""
