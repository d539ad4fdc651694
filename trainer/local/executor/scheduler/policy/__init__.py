"""The scheduler's decisions, pure (pyproject.toml's contract on ``trainer.local.**.policy``):
:mod:`.scheduling` over the nodes, pods and gangs of :mod:`.views`."""
