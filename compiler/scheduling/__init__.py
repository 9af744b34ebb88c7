"""Scheduling: the software pipeline (``pipeline``), issue cycles (``schedule``,
``busy``; ``datapath`` for program text), configuration updates in their windows
(``reconfigure``, ``config_updates``), fetch delays (``fetch_delay``) and the
independent schedule verifier (``verify``)."""
