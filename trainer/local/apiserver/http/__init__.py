"""The HTTP layer of the local API server, above :mod:`trainer.local.apiserver.core`.

It decodes a request, checks who sends it (:mod:`trainer.local.apiserver.auth.authn`), routes it
and encodes the answer; what happens to objects is the core's.
"""
