"""The admission chain of a write: built-in defaulting and checks, CRD structural schema
(pruning, defaults, validation and CEL rules), and the registered admission webhooks, called
over HTTPS with their caBundle exactly as a kube-apiserver calls them.

Order, as in Kubernetes: decode (prune unknown fields, apply schema defaults) -> mutating
webhooks -> schema defaults again -> validation (schema, CEL, built-in checks) -> validating
webhooks.

The core imports nothing of HTTP: a webhook is called through the :class:`WebhookTransport`
it is given (the HTTP layer's client, :mod:`trainer.local.apiserver.http.webhook_client`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import uuid
from typing import Any, Protocol

import jsonpatch

from trainer.jobset import contract as jsc
from trainer.jobset import webhook as jobset_webhook
from trainer.local.apiserver import builtin, metadata
from trainer.local.apiserver.core import crd, rules
from trainer.local.apiserver.errors import APIError, bad_request, invalid
from trainer.local.apiserver.resources import ResourceType
from trainer.local.apiserver.selectors import parse_label_selector
from trainer.local.apiserver.store import Store
from trainer.machinery.openapi import ABSENT, apply_defaults, defaults_are_pruned, prune, validate


class WebhookCallError(RuntimeError):
    """A webhook could not be called (connection, TLS, protocol): the message says why."""


class WebhookTransport(Protocol):
    """How a webhook is called: POST ``body`` (JSON) to ``url`` trusting ``ca_bundle``
    (base64 PEM; empty: the system's CAs) within ``timeout`` seconds. Answers the HTTP status
    and body; raises :class:`WebhookCallError`, ``TimeoutError`` or ``OSError``."""

    async def post(
        self, url: str, ca_bundle: str, body: bytes, timeout: float
    ) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...


def _selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions); empty matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        text = {
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(op)
        if text is None:
            return False
        if not all(r.matches(labels) for r in parse_label_selector(text)):
            return False
    return True


def _rule_matches(rule: dict[str, Any], rt: ResourceType, operation: str, subresource: str) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and operation not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and rt.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and rt.version not in versions:
        return False
    resource = rt.plural + (f"/{subresource}" if subresource else "")
    resources = rule.get("resources") or []
    if not any(
        r in ("*", resource)
        or (r == "*/*")
        or (r.endswith("/*") and r[:-2] == rt.plural and subresource)
        for r in resources
    ):
        return False
    scope = str(rule.get("scope", "*"))
    return scope == "*" or (scope == "Namespaced") == rt.namespaced


def encode_review(review: dict[str, Any]) -> bytes:
    """The AdmissionReview as kube-apiserver writes it: compact JSON in UTF-8 (Python's default
    separators and ``\\u`` escapes would make a large object's review up to 6 times larger)."""
    try:
        return json.dumps(review, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate in a string: escape everything instead
        return json.dumps(review, separators=(",", ":")).encode()


def http_error(status: int, body: bytes) -> str:
    """Why a webhook call failed with HTTP ``status``: its Status message when it sent one."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    if isinstance(message, str) and message:
        return f"the server responded with HTTP {status}: {message[:500]}"
    return f"the server responded with HTTP {status}"


class Admission:
    """The chain; webhook configurations and namespaces are read from ``store``."""

    def __init__(self, store: Store, transport: WebhookTransport) -> None:
        self.store = store
        self.transport = transport

    async def close(self) -> None:
        await self.transport.close()

    # --- the chain --------------------------------------------------------------------------
    async def admit(
        self,
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        dry_run: bool,
        field_validation: str,
        warnings: list[str],
        subresource: str = "",
    ) -> dict[str, Any]:
        """Decode, default, validate and call the webhooks whose rules match the request
        (``subresource``: a write to ``<plural>/status`` matches only rules naming it, as in
        kube-apiserver)."""
        name = obj["metadata"].get("name", "")
        if rt.schema is not None:
            obj = self._decode(rt, obj, field_validation, warnings)
            warnings += rules.finalizer_warnings(
                obj["metadata"], None if old is None else old["metadata"]
            )
        else:
            errors = builtin.validate_name(rt, name) if operation == "CREATE" else []
            errors += builtin.prepare(rt, obj, creating=operation == "CREATE")
            if old is not None:
                errors += builtin.validate_update(rt, obj, old)
            if rt.kind == "CustomResourceDefinition":
                errors += crd.validate_crd(obj)
            if errors:
                raise invalid(rt.kind, rt.group, name, errors)
        given = obj
        if old is None and rt.group == jsc.GROUP and rt.kind == jsc.KIND:
            obj = jobset_webhook.default_create(obj)  # JobSet's own mutating webhook, built in
        mutated = await self._webhooks(
            rt,
            operation,
            obj,
            old,
            mutating=True,
            dry_run=dry_run,
            warnings=warnings,
            subresource=subresource,
        )
        if mutated is not given:  # a webhook's patch is decoded and checked as a request body is
            mutated = metadata.check(rt, mutated, obj["metadata"].get("namespace") or "", name)
        if rt.schema is not None and (mutated is not given or not self._defaults_pruned(rt)):
            mutated, _ = prune(rt.schema, mutated)
            mutated = apply_defaults(rt.schema, mutated, in_place=True)  # prune's result is a copy
        obj = mutated
        if rt.schema is not None:
            # As kube-apiserver's strategy for custom resources: the metadata, then the schema
            # (of the status alone for a status update), then the CEL rules, in one answer.
            errors = metadata.validate(rt, obj)
            errors += validate(
                rt.schema,
                obj,
                ABSENT if old is None else old,
                memo=rt.rule_memo,
                scope="status" if subresource == "status" else "",
                prior=errors,
            )
            if errors:
                raise invalid(rt.kind, rt.group, name, errors)
        if rt.group == jsc.GROUP and rt.kind == jsc.KIND:
            # JobSet's own validating webhook (vjobset.kb.io), built in. JobSet v0.12.0
            # answers a 422 Invalid of the JobSet (apierrors.NewInvalid) on create and on
            # update, which kube-apiserver passes on with its code (docs/local-plane.md,
            # "JobSet's admission checks").
            denied = (
                jobset_webhook.validate_create(obj)
                if old is None
                else jobset_webhook.validate_update(obj, old)
            )
            if denied:
                refusal = invalid(rt.kind, rt.group, name, denied)
                denied_by = 'admission webhook "vjobset.kb.io" denied the request: '
                raise APIError(422, "Invalid", denied_by + refusal.message, refusal.details)
        await self._webhooks(
            rt,
            operation,
            obj,
            old,
            mutating=False,
            dry_run=dry_run,
            warnings=warnings,
            subresource=subresource,
        )
        return obj

    async def admit_delete(self, rt: ResourceType, old: dict[str, Any], *, dry_run: bool) -> None:
        await self._webhooks(rt, "DELETE", None, old, mutating=False, dry_run=dry_run, warnings=[])

    @staticmethod
    def _defaults_pruned(rt: ResourceType) -> bool:
        """Whether pruning and defaulting again leave an unmutated object as it is (so the pass
        after the mutating webhooks can be skipped): :func:`defaults_are_pruned`, once per
        schema."""
        if rt.schema is None or rt.rule_memo is None:
            return False
        return rt.rule_memo.node_fact(rt.schema, defaults_are_pruned)

    def _decode(
        self, rt: ResourceType, obj: dict[str, Any], field_validation: str, warnings: list[str]
    ) -> dict[str, Any]:
        assert rt.schema is not None
        pruned, unknown = prune(rt.schema, obj)
        if unknown:
            if field_validation == "Strict":
                detail = ", ".join(f'unknown field "{p}"' for p in unknown)
                raise bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"strict decoding error: {detail}"
                )
            if field_validation == "Warn":
                warnings.extend(f'unknown field "{p}"' for p in unknown)
        result: dict[str, Any] = apply_defaults(rt.schema, pruned, in_place=True)  # a copy
        return result

    # --- webhooks ---------------------------------------------------------------------------
    def _configurations(self, mutating: bool) -> list[dict[str, Any]]:
        plural = "mutatingwebhookconfigurations" if mutating else "validatingwebhookconfigurations"
        return list(self.store.items(("admissionregistration.k8s.io", plural)))

    async def _webhooks(
        self,
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        *,
        mutating: bool,
        dry_run: bool,
        warnings: list[str],
        subresource: str = "",
    ) -> dict[str, Any]:
        current = obj
        subject = obj if obj is not None else old
        assert subject is not None
        if rt.group == "admissionregistration.k8s.io":
            return current or {}  # webhook configurations are never subject to webhooks
        for config in sorted(self._configurations(mutating), key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or []:
                if not self._applies(hook, rt, operation, subject, old, subresource):
                    continue
                response = await self._call(hook, rt, operation, current, old, dry_run, subresource)
                if response is None:
                    continue  # failurePolicy Ignore and the call failed
                warnings.extend(response.get("warnings") or [])
                if not response.get("allowed"):
                    status = response.get("status") or {}
                    # As kube-apiserver: a denial is never answered below 400.
                    code = max(int(status.get("code") or 400), 400)
                    message = status.get("message") or ""
                    raise APIError(
                        code,
                        status.get("reason") or ("Forbidden" if code == 403 else "BadRequest"),
                        f'admission webhook "{hook.get("name")}" denied the request: {message}',
                    )
                if mutating and current is not None and response.get("patch"):
                    if response.get("patchType") != "JSONPatch":
                        raise APIError(
                            500,
                            "InternalError",
                            f'webhook "{hook.get("name")}" returned an unsupported patchType',
                        )
                    try:
                        ops = json.loads(base64.b64decode(response["patch"]))
                        current = jsonpatch.JsonPatch(ops).apply(current, in_place=False)
                    except (
                        ValueError,
                        jsonpatch.JsonPatchException,
                        jsonpatch.JsonPointerException,
                    ) as exc:
                        raise APIError(
                            500,
                            "InternalError",
                            f'webhook "{hook.get("name")}" returned an invalid patch: {exc}',
                        ) from None
        return current if current is not None else {}

    def _applies(
        self,
        hook: dict[str, Any],
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        subresource: str,
    ) -> bool:
        if not any(_rule_matches(r, rt, operation, subresource) for r in hook.get("rules") or []):
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        old_labels = ((old or {}).get("metadata") or {}).get("labels") or {}
        object_selector = hook.get("objectSelector")
        if object_selector and not (
            _selector_matches(object_selector, labels)
            or (old is not None and _selector_matches(object_selector, old_labels))
        ):
            return False
        ns_selector = hook.get("namespaceSelector")
        if ns_selector and rt.namespaced:
            ns_name = (obj.get("metadata") or {}).get("namespace", "")
            ns = self.store.get(("", "namespaces"), "", ns_name) or {}
            ns_labels = dict((ns.get("metadata") or {}).get("labels") or {})
            ns_labels.setdefault("kubernetes.io/metadata.name", ns_name)
            if not _selector_matches(ns_selector, ns_labels):
                return False
        return True

    async def _send(self, client: dict[str, Any], body: bytes, timeout: float) -> tuple[int, bytes]:
        """POST the review to ``clientConfig.url``. A ``clientConfig.service`` has no
        endpoint here: the plane makes no EndpointSlices and routes no Service
        (docs/local-plane.md, "What the local plane is for"), so the call fails as
        kube-apiserver's does for a Service without a ready endpoint."""
        ca_bundle = client.get("caBundle", "")
        url = client.get("url")
        if url:
            return await self.transport.post(url, ca_bundle, body, timeout)
        ref = client.get("service") or {}
        host = f"{ref.get('name', '')}.{ref.get('namespace', '')}.svc"
        url = f"https://{host}:{int(ref.get('port') or 443)}{ref.get('path') or ''}"
        raise RuntimeError(
            f'failed to call webhook: Post "{url}": no endpoints available for service '
            f'"{ref.get("name", "")}"'
        )

    async def _call(
        self,
        hook: dict[str, Any],
        rt: ResourceType,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        dry_run: bool,
        subresource: str,
    ) -> dict[str, Any] | None:
        name = hook.get("name", "")
        policy = hook.get("failurePolicy", "Fail")
        timeout = float(hook.get("timeoutSeconds") or 10)
        client = hook.get("clientConfig") or {}
        subject = obj if obj is not None else old or {}
        meta = subject.get("metadata") or {}
        request = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "requestKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", "") if rt.namespaced else "",
            "operation": operation,
            "userInfo": {
                "username": "system:admin",
                "groups": ["system:masters", "system:authenticated"],
            },
            # Serialised before anything else runs: no copy needed (a deep copy of a large
            # object costs the API server's event loop hundreds of milliseconds).
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
        }
        if subresource:
            request["subResource"] = subresource
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        }
        try:
            status, raw = await self._send(client, encode_review(review), timeout)
            if status != 200:
                raise RuntimeError(http_error(status, raw))
            body = json.loads(raw) if raw.strip() else None
            response = body.get("response") if isinstance(body, dict) else None
            if not isinstance(response, dict) or response.get("uid") != request["uid"]:
                raise RuntimeError("expected a response with the request's uid")
            return response
        except (
            TimeoutError,
            RuntimeError,
            ValueError,
            ssl.SSLError,
            OSError,
        ) as exc:
            reason = (
                "context deadline exceeded"
                if isinstance(exc, asyncio.TimeoutError)
                else str(exc) or type(exc).__name__
            )
            if policy == "Ignore":
                return None
            raise APIError(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": {reason}',
            ) from None
