"""The embedded local control plane: an in-memory API server and a JobSet executor."""
