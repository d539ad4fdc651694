"""Who may talk to the local API server and what they may do (docs/local-plane.md, "Security
of the local control plane"): the checks every request passes (:mod:`.authn`), RBAC over the
stored roles (:mod:`.authz`), service-account tokens (:mod:`.tokens`) and the server's TLS
(:mod:`.tls`). Nothing here imports HTTP."""
