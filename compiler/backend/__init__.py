"""The compiler's back end: what a scheduled program is shown as (listings, traces
that open in a trace viewer, each unit's use over time)."""
