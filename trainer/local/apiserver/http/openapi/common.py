"""OpenAPI publishing: the names every part shares (definition names of the meta types,
reference prefixes, media types, what Swagger 2.0 drops)."""

from __future__ import annotations

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
STATUS = f"{META}.Status"
DELETE_OPTIONS = f"{META}.DeleteOptions"
PATCH = f"{META}.Patch"
INFO = {"title": "Kubernetes", "version": "v1.32.0"}
JSON_TYPES = ("application/json", "application/yaml")
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)
V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2"
PROTOBUF_V2_TYPE = f"{PROTOBUF_V2}@v1.0+protobuf"
# What kube-openapi answers with: Go's mime parser (client-go) rejects the "@" of the request's
# media type, so the response spells it with a dot.
PROTOBUF_V2_RESPONSE = f"{PROTOBUF_V2}.v1.0+protobuf"
# Keywords the v2 publishing of a CRD schema drops (Swagger 2.0 has no equivalent).
V2_DROPPED = ("nullable", "anyOf", "oneOf", "not", "x-kubernetes-validations")
