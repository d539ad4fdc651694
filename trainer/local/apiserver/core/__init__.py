"""The core of the local API server: objects and their rules, with no HTTP.

:class:`~.storage.Storage` (registry, store, create / update / patch / delete / list) with the
modules it sequences: :mod:`.rules` (pure write rules), :mod:`.admission` (defaulting,
validation, webhooks through a transport it is given), :mod:`.crd` (CRDs become served
kinds), :mod:`.gc` (ownerReference cascades, finalizers, namespace termination) and
:mod:`.persistence` (the state file). An import-linter contract (pyproject.toml) keeps this
package free of aiohttp and of :mod:`trainer.local.apiserver.http`.
"""
