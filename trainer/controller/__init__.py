"""The asyncio reconciler: watch caches, work queue, reconcile, status, leader election."""
