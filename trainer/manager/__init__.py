"""The manager of a process, as controller-runtime's: the parts of a process (servers,
webhooks, watch caches, workers) are runnables added to one :class:`~.manager.Manager`, which
starts them in stages, campaigns for leadership, and stops them in reverse order
(docs/design.md, "The manager"). Generic: it knows no Trainer controller or webhook.

- :mod:`.runnable`: the :class:`~.runnable.Runnable` protocol and its stages;
- :mod:`.manager`: the manager;
- :mod:`.election`: the leader-election glue (the Lease's settings, the campaign);
- :mod:`.leader`: leader election on a Lease, as client-go's.
"""
