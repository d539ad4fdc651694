"""The kubelet's pure rules (pyproject.toml's contract on ``trainer.local.**.policy``): what a
container sees (:mod:`.podenv`, :mod:`.rewrites`, :mod:`.volumes`, :mod:`.incluster`), its
termination message (:mod:`.termination`) and the pod status (:mod:`.pod_status`). No event
loop, no processes, no API client; the few file operations that carry out a plan
(:func:`.volumes.write_volume`, :func:`.termination.prepare` and :func:`.termination.read_file`,
:func:`.podenv.find_executable`) sit beside it, called by the kubelet."""
