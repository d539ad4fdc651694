"""This host as a Node (docs/local-plane.md, "The node"): registered and kept alive
(:mod:`.heartbeat`), what ``--node-config`` declares (:mod:`.config`) and its GPUs
(:mod:`.devices`)."""
