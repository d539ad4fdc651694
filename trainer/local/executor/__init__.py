"""The local JobSet executor: plays the JobSet and Job controllers, the scheduler and the
kubelet against the embedded API server, running each pod's containers as local processes.

Split by role (docs/local-plane.md, "The executor"), each role's pure rules in a ``policy``
subpackage that an import contract keeps free of I/O (pyproject.toml):

- :mod:`.controllers`: the JobSet and Job controllers.
- :mod:`.scheduler`: binds pending pods to nodes, as kube-scheduler does.
- :mod:`.kubelet`: the pod workers: each pod's lifecycle, containers, probes, logs and status.
- :mod:`.sandbox`: what keeps a pod to itself on a shared host: network namespace, hostname,
  cgroups, host ports, ssh, Services by name.
- :mod:`.node`: this host as a Node: its registration and heartbeat, ``--node-config``, GPUs.
- :mod:`.simulation`: ``--simulate``'s nodes and their kubelet, without processes.
- :mod:`.policy`: what every role agrees on about a pod (its fields and the annotations the
  JobSet controller writes for the kubelet).

:mod:`.api` is how every part reaches the API server; :mod:`.runner` runs the roles of
``trainer up`` and :mod:`.nodeagent` the kubelet alone (``trainer node``).
"""
