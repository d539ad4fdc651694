"""What the local API server of a plane that runs pods puts into every namespace, as a
cluster's controllers do (trainer/local/apiserver/core/namespace_objects.py): the ``default``
ServiceAccount and ConfigMap ``kube-root-ca.crt`` with the CA in-cluster clients verify the
server with, also in a namespace created later."""

from __future__ import annotations

from tests.integration.harness import local_plane


async def test_every_namespace_gets_the_default_service_account_and_the_root_ca() -> None:
    async with local_plane() as plane:
        plane.server.attach_pods()  # as the local plane does once its executor started
        plane.server.storage.create_unadmitted("v1", "Namespace", {"metadata": {"name": "team"}})
        ca = plane.server.tls.ca_pem.decode()
        assert ca.startswith("-----BEGIN CERTIFICATE-----")
        for namespace in ("default", "team"):
            root = plane.get("v1", "configmaps", namespace, "kube-root-ca.crt")
            assert root is not None and root["data"] == {"ca.crt": ca}, namespace
            assert plane.get("v1", "serviceaccounts", namespace, "default") is not None
