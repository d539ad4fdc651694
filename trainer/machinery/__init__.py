"""Generic Kubernetes machinery: what any Kubernetes program needs and Trainer does not
define. It imports nothing else of the project (docs/design.md, "Layers")."""
