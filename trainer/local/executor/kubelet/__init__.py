"""The local kubelet: runs every pod bound to this host as local processes and reports it back
through the API (docs/local-plane.md, "The executor").

:mod:`.kubelet` watches the pods and owns the host's processes; :mod:`.pod` runs one pod's
lifecycle, :mod:`.containers` one container's process and restarts, :mod:`.probes` (with
:mod:`.grpc_probe`) its probes, :mod:`.logsink` its log; :mod:`.podhost` is what they share,
:mod:`.podnetwork` and :mod:`.sshpod` the pod's side of the sandbox. What a container sees and
the status a pod reports are planned purely in :mod:`.policy`."""
