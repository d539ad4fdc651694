"""JobSet in one place: its contract (names, labels, owner and condition vocabulary, fields
mutable while suspended: :mod:`.contract`), its API types (:mod:`.types`), its own webhooks'
defaulting and checks (:mod:`.webhook`) and the name budget of a JobSet (:mod:`.budget`).

It imports only the floor (``trainer.machinery``), so the local plane, the Trainer build, the
dashboard and the CLI share it without importing each other (docs/design.md, "Layers"). This
file imports nothing: the dashboard, which stays lean (no pydantic), reads :mod:`.contract`."""
