"""The controllers' pure rules: the JobSet controller's plan and status (:mod:`.jobset`), how
they read batch/v1 Jobs and their pods (:mod:`.batch`) and which pods a JobSet still waits on
(:mod:`.waiting`). No client, no event loop, no I/O (pyproject.toml's contract on
``trainer.local.**.policy``)."""
