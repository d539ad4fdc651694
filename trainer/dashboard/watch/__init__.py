"""The dashboard's view of the cluster: watch caches, metric history and change subscriptions
(see :mod:`trainer.dashboard.watch.cache`)."""
