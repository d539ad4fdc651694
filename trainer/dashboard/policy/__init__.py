"""What the dashboard shows, as pure functions of the API objects it watched (no API client,
server or event loop: the *policy packages are pure* contract): a TrainJob's summary and
progress (:mod:`.summary`), a runtime's row (:mod:`.runtimes`), the Nodes page
(:mod:`.nodes`) and the metric history (:mod:`.history`)."""
