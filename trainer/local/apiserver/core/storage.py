"""The storage core of the local API server: every read and write of an object, with no HTTP.

:class:`Storage` owns the resource registry (built-in kinds and CRDs), the versioned
:class:`~trainer.local.apiserver.store.Store`, the admission chain, the garbage collector and
the state file, and offers create / update / patch / delete / list as a public API. The HTTP
layer (:mod:`trainer.local.apiserver.http`) decodes a request, calls one of these methods and
encodes the answer; the garbage collector and CRD handling call them too. A write is:
check the body (:mod:`.metadata`) -> admission (defaults, validation, webhooks) -> compare the
resourceVersion with the stored one (another write may have landed while webhooks ran) ->
record managedFields -> store (persisted before watchers hear of it) -> after-write effects
(CRD registration, a namespace's default ServiceAccount, GC notice). The decisions along the
way are pure functions in :mod:`.rules`.
"""

from __future__ import annotations

import copy
import datetime as dt
import secrets
import uuid
from typing import Any

from trainer.local.apiserver import apply as ssa
from trainer.local.apiserver import builtin, metadata
from trainer.local.apiserver.core import crd, gc, namespace_objects, rules
from trainer.local.apiserver.core.admission import Admission, WebhookTransport
from trainer.local.apiserver.core.namespace_objects import (
    ensure_default_service_account,
    ensure_root_ca,
)
from trainer.local.apiserver.core.persistence import Persistence
from trainer.local.apiserver.core.rules import WriteOptions
from trainer.local.apiserver.errors import (
    APIError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    namespace_terminating,
    not_found,
)
from trainer.local.apiserver.hooks import Hooks
from trainer.local.apiserver.patch import APPLY, MERGE
from trainer.local.apiserver.resources import ResourceType, served, served_copy
from trainer.local.apiserver.selectors import matcher
from trainer.local.apiserver.statefile import StateFileError
from trainer.local.apiserver.store import Event, Store
from trainer.machinery.times import format_time

PATCH_RETRIES = 5
STATUS_ON_CREATE = frozenset({"Namespace", "Node"})
"""Kinds with a status subresource whose status a create keeps."""


class Storage:
    """Objects of every served kind, read and written with Kubernetes semantics.
    ``state_file``: persist every write there (loaded at start); ``webhooks``: how admission
    webhooks are called (the HTTP layer passes its client)."""

    def __init__(
        self,
        *,
        webhooks: WebhookTransport,
        history: int = 10_000,
        state_file: str | None = None,
        reset_damaged_state: bool = False,
    ) -> None:
        self.registry = builtin.new_registry()
        self.store = Store(history=history)
        self.hooks = Hooks()
        self.admission = Admission(self.store, webhooks)
        self.gc = gc.GarbageCollector(self)
        self.state_file = state_file
        self.persistence: Persistence | None = None
        self.root_ca_pem = ""
        self._bootstrap(reset_damaged_state)

    # --- lifecycle --------------------------------------------------------------------------
    def _bootstrap(self, reset_damaged_state: bool) -> None:
        if not self.state_file:
            namespace_objects.ensure_system_namespaces(self.store, self.create_unadmitted)
            return
        self.persistence = Persistence(
            self.registry, self.store, self.state_file, reset_damaged=reset_damaged_state
        )
        try:
            self.persistence.load()
            namespace_objects.ensure_system_namespaces(self.store, self.create_unadmitted)
        except APIError as err:  # the first writes could not be stored
            self.persistence.close()
            raise StateFileError(self.state_file, f"cannot be written ({err.message})") from None
        except BaseException:
            self.persistence.close()
            raise

    def start_background(self) -> None:
        """Start the garbage collector (it resyncs from the stored objects first)."""
        self.gc.start()

    async def stop_background(self) -> None:
        """End every watch, the garbage collector and the webhook connections."""
        self.store.close_watchers()
        await self.gc.stop()
        await self.admission.close()

    def close(self) -> None:
        """Close the state file (after the last write)."""
        if self.persistence is not None:
            self.persistence.close()

    def now(self) -> str:
        """The server clock as RFC 3339 (tests move it through :attr:`hooks`)."""
        return self.hooks.clock.timestamp()

    # --- reads ------------------------------------------------------------------------------
    def resource(self, api_version: str, kind_or_plural: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        rt = self.registry.get(group, version, kind_or_plural) or self.registry.by_kind(
            api_version, kind_or_plural
        )
        if rt is None:
            raise KeyError(f"{api_version} {kind_or_plural} is not served")
        return rt

    def objects(
        self, api_version: str, kind_or_plural: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Copies of the stored objects of a kind (one namespace or all)."""
        rt = self.resource(api_version, kind_or_plural)
        return [served_copy(rt, o) for o in self.store.items(rt.key, namespace)]

    def get_object(
        self, api_version: str, kind_or_plural: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        rt = self.resource(api_version, kind_or_plural)
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        return served_copy(rt, obj) if obj is not None else None

    def get_or_404(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """The stored object (never change it); 404 when there is none."""
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return obj

    def list_body(
        self,
        rt: ResourceType,
        items: list[dict[str, Any]],
        *,
        cont: str = "",
        remaining: int | None = None,
    ) -> dict[str, Any]:
        """A ``<Kind>List`` of ``items`` at the current resourceVersion."""
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        return {
            "apiVersion": rt.api_version,
            "kind": rt.list_kind,
            "metadata": meta,
            "items": items,
        }

    def list_objects(
        self, rt: ResourceType, namespace: str, query: dict[str, str]
    ) -> dict[str, Any]:
        """A list as ``query`` asks (label and field selectors, ``limit`` and ``continue``)."""
        rules.check_list_options(query)
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"))
        limit = metadata.int_param(query, "limit") or 0
        token = query.get("continue")
        start = rules.decode_continue(token, self.store.oldest_rv) if token else None
        items = self.store.select(rt.key, namespace or None, match, start)
        remaining = len(items) - limit if 0 < limit < len(items) else 0
        if remaining:
            del items[limit:]
        cont = ""
        if remaining:
            last = items[-1]["metadata"]
            cont = rules.encode_continue(self.store.rv, last.get("namespace") or "", last["name"])
        items = [served(rt, o) for o in items]
        return self.list_body(rt, items, cont=cont, remaining=remaining if cont else None)

    # --- creation ---------------------------------------------------------------------------
    def _check_namespace(
        self, rt: ResourceType, namespace: str, *, creating: bool, name: str = ""
    ) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise bad_request(
                "the namespace of the object does not match the namespace on the request"
            )
        ns = self.store.get(("", "namespaces"), "", namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if creating and (ns.get("metadata") or {}).get("deletionTimestamp"):
            raise namespace_terminating(rt.plural, rt.group, name, namespace)

    async def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        options: WriteOptions | None = None,
        *,
        applied: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        options = options or WriteOptions()
        obj = metadata.check(rt, body, namespace, warnings=options.warnings)
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if rt.namespaced else ""
        self._check_namespace(rt, namespace, creating=True, name=meta.get("name") or "")
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rt.kind, rt.group, "", builtin.validate_name(rt, ""))
            # SimpleNameGenerator: at most 58 characters of the prefix, then 5 random ones.
            meta["name"] = prefix[:58] + "".join(
                secrets.choice(rules.GENERATE_CHARS) for _ in range(5)
            )
        for key in rules.DROPPED_ON_CREATE:
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        meta["generation"] = 1
        # kube-apiserver keeps a new Node's status (a kubelet, or KWOK's user, registers a node
        # with its capacity: pkg/registry/core/node PrepareForCreate); a Namespace's is defaulted.
        if rt.status and rt.kind not in STATUS_ON_CREATE:
            obj.pop("status", None)
        obj = await self.admission.admit(
            rt,
            "CREATE",
            obj,
            None,
            dry_run=options.dry_run,
            field_validation=options.field_validation,
            warnings=options.warnings,
        )
        if self.store.get(rt.key, namespace, meta["name"]) is not None:
            raise already_exists(rt.plural, rt.group, meta["name"])
        if not applied:
            ssa.track_update(rt, None, obj, options.manager or "unknown", now=self.now())
        if options.dry_run:
            meta.pop("uid", None)
            return obj, True
        self.store.put(rt.key, obj, None)
        self._after_write(rt, obj, None)
        return obj, True

    def create_unadmitted(self, api_version: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object with no request and no admission (manager ``bootstrap``): what
        the server's own built-in controllers write, as kube-apiserver creates the system
        namespaces and kube-controller-manager a namespace's default ServiceAccount and
        ``kube-root-ca.crt``; tests use it to set up state. Every client, the local plane's
        own seeding included, writes through the API instead."""
        rt = self.resource(api_version, kind)
        body = {"apiVersion": api_version, "kind": rt.kind, **copy.deepcopy(obj)}
        ns = (body.get("metadata") or {}).get("namespace", "default" if rt.namespaced else "")
        created = metadata.check(rt, body, ns if rt.namespaced else "")
        meta = created["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        meta["generation"] = 1
        builtin.prepare(rt, created, creating=True)
        ssa.track_update(rt, None, created, "bootstrap", now=self.now())
        self.store.put(rt.key, created, None)
        self._after_write(rt, created, None)
        return created

    # --- update and patch -------------------------------------------------------------------
    async def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        options: WriteOptions | None = None,
        *,
        subresource: str = "",
        check_rv: bool = True,
    ) -> dict[str, Any]:
        options = options or WriteOptions()
        old = self.get_or_404(rt, namespace, name)
        new = metadata.check(rt, body, namespace, name, warnings=options.warnings)
        new["metadata"]["name"] = name
        rv = new["metadata"].get("resourceVersion")
        rules.require_resource_version(rt, name, rv)
        if check_rv and rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name, rules.MODIFIED)
        return await self.commit_update(rt, old, new, options, subresource=subresource)

    async def commit_update(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        options: WriteOptions,
        *,
        subresource: str,
        applied: bool = False,
    ) -> dict[str, Any]:
        """Admit and store ``new`` in place of the stored ``old`` (the update, patch and apply
        paths, and the garbage collector's finalizer removals, all end here). Raises
        :class:`~.rules.StaleWrite` when another write landed while admission ran."""
        old_meta = old["metadata"]
        if not subresource:
            changed = rules.immutable_meta_errors(old_meta, new["metadata"])
            if changed:
                raise invalid(rt.kind, rt.group, old_meta["name"], changed)
        new = rules.for_subresource(rt, old, new, subresource, applied=applied)
        meta = new["metadata"]
        rules.keep_server_fields(rt, old_meta, meta)
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise invalid(
                    rt.kind, rt.group, meta["name"], [rules.finalizer_error(sorted(added))]
                )
        meta["generation"] = old_meta.get("generation", 1) + (
            1 if rules.spec_changed(old, new) else 0
        )
        new = await self.admission.admit(
            rt,
            "UPDATE",
            new,
            old,
            dry_run=options.dry_run,
            field_validation=options.field_validation,
            warnings=options.warnings,
            subresource=subresource,
        )
        current = self.store.get(rt.key, old_meta.get("namespace") or "", old_meta["name"])
        if current is None:
            raise not_found(rt.plural, rt.group, old_meta["name"])
        if current["metadata"]["resourceVersion"] != old_meta["resourceVersion"]:
            # Another write landed while admission ran (webhooks are awaited): never overwrite
            # it. Patches are retried on the fresh object; updates answer 409, as the real
            # server's guaranteed update does.
            raise rules.StaleWrite(rt.plural, rt.group, old_meta["name"])
        if not applied:
            manager = options.manager or "unknown"
            ssa.track_update(rt, old, new, manager, subresource=subresource, now=self.now())
        meta = new["metadata"]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if rules.same(old, new):
            return old  # a no-op write changes nothing, not even the resourceVersion
        if options.dry_run:
            return new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer is gone: stored and deleted in one persisted batch.
            self._after_delete(rt, self.store.put_and_remove(rt.key, new, old)[1])
            return new
        self.store.put(rt.key, new, old)
        self._after_write(rt, new, old)
        return new

    async def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        options: WriteOptions | None = None,
        *,
        subresource: str = "",
    ) -> tuple[dict[str, Any], bool]:
        """A patch, retried on the fresh object when another write lands while admission
        runs (the real server retries patches the same way). True when it created."""
        options = options or WriteOptions()
        for _ in range(PATCH_RETRIES):
            try:
                return await self._patch_once(
                    rt, namespace, name, content_type, body, options, subresource=subresource
                )
            except rules.StaleWrite:
                continue
        raise conflict(rt.plural, rt.group, name, rules.MODIFIED)

    async def _patch_once(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        options: WriteOptions,
        *,
        subresource: str,
    ) -> tuple[dict[str, Any], bool]:
        old = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if content_type == APPLY:
            return await self._apply(
                rt, namespace, name, old, body, options, subresource=subresource
            )
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        if content_type in (MERGE, "application/json"):
            # A merge patch builds new maps only along the paths it changes and shares the
            # rest with the stored object (a deep copy of every object at every patch was the
            # API server's largest cost at cluster scale, hack/bench/simulate.py); what the
            # write path changes in place is the metadata, which gets its own copy.
            patched = rules.patched(rt, old, content_type, body)
            if isinstance(patched, dict):
                patched["metadata"] = rules.own_metadata(patched.get("metadata"))
        else:
            patched = rules.patched(rt, copy.deepcopy(old), content_type, body)
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        patched = metadata.check(rt, patched, namespace, name, warnings=options.warnings)
        rv = patched["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name, rules.MODIFIED)
        obj = await self.commit_update(rt, old, patched, options, subresource=subresource)
        return obj, False

    async def _apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        old: dict[str, Any] | None,
        body: Any,
        options: WriteOptions,
        *,
        subresource: str,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply of ``body`` by the options' manager (creates when nothing is
        stored)."""
        manager, force = options.manager, options.force
        if not manager:
            raise bad_request("PATCH with apply requires a fieldManager")
        if not isinstance(body, dict):
            raise bad_request("an apply patch must be an object")
        metadata.check_apply_config(rt, body)
        config = copy.deepcopy(body)
        now = self.now()
        if old is None:
            if subresource:
                raise not_found(rt.plural, rt.group, name)
            created = ssa.apply(rt, None, config, manager, force=force, now=now)
            created.setdefault("metadata", {})["name"] = name
            obj, _ = await self.create(rt, namespace, created, options, applied=True)
            return obj, True
        merged = ssa.apply(rt, old, config, manager, force=force, subresource=subresource, now=now)
        obj = await self.commit_update(
            rt,
            old,
            metadata.check(rt, merged, namespace, name, warnings=options.warnings),
            options,
            subresource=subresource,
            applied=True,
        )
        return obj, False

    # --- deletion ---------------------------------------------------------------------------
    async def bind(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        binding: Any,
        options: WriteOptions | None = None,
    ) -> dict[str, Any]:
        """``pods/{name}/binding``: assign the pod to a node (:func:`.rules.bound_pod`),
        retried on the fresh pod when another write lands meanwhile."""
        options = options or WriteOptions()
        for _ in range(PATCH_RETRIES):
            old = self.get_or_404(rt, namespace, name)
            new = rules.bound_pod(old, binding, self.now())
            try:
                return await self.commit_update(rt, old, new, options, subresource="binding")
            except rules.StaleWrite:
                continue
        raise conflict(rt.plural, rt.group, name, rules.MODIFIED)

    async def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        policy: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        grace: int | None = None,
    ) -> dict[str, Any]:
        """Delete now, or mark deleted while finalizers (the policy's included) remain, or
        while a running pod's kubelet stops it (``grace``: DeleteOptions'
        ``gracePeriodSeconds``; :func:`rules.pod_grace`)."""
        old = self.get_or_404(rt, namespace, name)
        meta = old["metadata"]
        rules.check_preconditions(rt, name, meta, preconditions or {})
        await self.admission.admit_delete(rt, old, dry_run=dry_run)
        if dry_run:
            return served_copy(rt, old)
        if rt.key == ("", "pods"):
            node = str((old.get("spec") or {}).get("nodeName") or "")
            has_node = bool(node) and self.store.get(("", "nodes"), "", node) is not None
            period = rules.pod_grace(old, grace, has_node=has_node)
            if period > 0:
                return self._delete_gracefully(rt, old, period)
        policy = policy or ("Foreground" if rt.kind == "Namespace" else "Background")
        finalizers = rules.deletion_finalizers(rt, policy, meta.get("finalizers") or [])
        if rt.kind == "Namespace" or finalizers:
            if meta.get("deletionTimestamp"):
                return served_copy(rt, old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = self.now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["finalizers"] = finalizers
            if rt.kind == "Namespace":
                new.setdefault("status", {})["phase"] = "Terminating"
            self.store.put(rt.key, new, old)
            self._after_write(rt, new, old)
            return served_copy(rt, new)
        self.remove(rt, old)
        return served_copy(rt, old)

    def _delete_gracefully(
        self, rt: ResourceType, old: dict[str, Any], period: int
    ) -> dict[str, Any]:
        """Mark a running pod for deletion in ``period`` seconds, as kube-apiserver does: its
        kubelet stops the containers and then deletes it with a grace period of 0. A later
        delete may shorten the period, never lengthen it."""
        meta = old["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current is not None and int(current) <= period:
            return served_copy(rt, old)
        new = copy.deepcopy(old)
        when = self.hooks.clock.now() + dt.timedelta(seconds=period)
        new["metadata"]["deletionTimestamp"] = format_time(when)
        new["metadata"]["deletionGracePeriodSeconds"] = period
        self.store.put(rt.key, new, old)
        self._after_write(rt, new, old)
        return served_copy(rt, new)

    async def delete_collection(
        self,
        rt: ResourceType,
        namespace: str,
        query: dict[str, str],
        *,
        policy: str | None,
        dry_run: bool,
    ) -> list[dict[str, Any]]:
        """Delete what the selectors in ``query`` match; the matched objects. A delete that
        fails for the object (not found, a webhook's denial) is skipped; one that could not be
        stored (5xx) stops the collection, so nothing is reported deleted that is not."""
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"))
        items = self.store.select(rt.key, namespace or None, match)
        for obj in items:
            meta = obj["metadata"]
            try:
                await self.delete(
                    rt, meta.get("namespace") or "", meta["name"], policy=policy, dry_run=dry_run
                )
            except APIError as err:
                if err.code >= 500:  # not persisted: never report it deleted
                    raise
        return items

    def remove(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """Remove a stored object now (its finalizers are done)."""
        self._after_delete(rt, self.store.remove(rt.key, obj))

    # --- effects of a write -----------------------------------------------------------------
    def _after_write(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            crd.on_crd_write(self.registry, self.store, self.now(), obj)
        if rt.key == ("", "namespaces") and old is None:
            namespace = obj["metadata"]["name"]
            ensure_default_service_account(self.store, self.create_unadmitted, namespace)
            ensure_root_ca(self.store, self.create_unadmitted, namespace, self.root_ca_pem)
        self.gc.notice(rt, obj)

    def publish_root_ca(self, ca_pem: str) -> None:
        """Every namespace gets ConfigMap ``kube-root-ca.crt`` with the CA that signed this
        server's certificate (:mod:`.namespace_objects`). Rewritten at every start (the CA is
        new each time)."""
        self.root_ca_pem = ca_pem
        namespace_objects.publish_root_ca(self.store, self.create_unadmitted, ca_pem)

    def _after_delete(self, rt: ResourceType, ev: Event) -> None:
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            crd.on_crd_delete(self.registry, self.store, ev.obj)
        self.gc.deleted(rt, ev.obj)
