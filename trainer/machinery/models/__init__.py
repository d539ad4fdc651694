"""Pydantic models of Kubernetes objects: the base every API model shares (lossless round trip,
schema markers for CRDs, :mod:`.base`) and the core/v1 and batch/v1 types an API embeds
(:mod:`.core`). Generic: the Trainer's API and the JobSet unit build on them
(docs/design.md, "Layers")."""
