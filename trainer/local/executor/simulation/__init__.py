"""Simulated nodes (docs/simulation.md): ``--simulate``'s file (:mod:`.config`) and the kubelet
that moves their pods through their lifecycle without a process (:mod:`.kubelet`)."""
