"""The local JobSet executor: plays the JobSet, Job and kubelet controllers against the embedded
API server, running each pod's containers as local processes."""
