"""Deploying to a cluster: the install rendered from jinja2 templates (``trainer manifests``)
and the kustomize tree under ``manifests/`` generated from the same templates."""
