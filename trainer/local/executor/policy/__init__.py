"""What the executor's roles agree on about a pod, pure: its fields as its containers read them
and this host's name, address and capacity (:mod:`.podfields`), and the ssh port map the JobSet
controller writes for the kubelet (:mod:`.sshports`).

Every ``policy`` package of the local plane holds pure rules: no event loop, no processes, no
API client, nothing of the plane that does I/O (an import contract in pyproject.toml names them
all by wildcard, ``trainer.local.**.policy``)."""
