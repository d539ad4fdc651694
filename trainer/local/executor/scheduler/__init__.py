"""The local plane's scheduler (docs/local-plane.md, "Scheduling"): :mod:`.scheduler` feeds the
pure decisions of :mod:`.policy` from watch caches and writes bindings and conditions."""
