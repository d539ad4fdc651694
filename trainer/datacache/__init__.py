"""This project's data cache: an in-memory Arrow cache that training ranks stream tabular
data from over Arrow Flight (gRPC), the program behind the ``cache-initializer`` step of the
``torch-distributed-with-cache`` runtime (docs/data-cache.md).

Modules, lowest first: :mod:`~trainer.datacache.sharding` (row ranges, pure),
:mod:`~trainer.datacache.auth` (signing and checking calls with the TrainJob's credential,
standard library only), :mod:`~trainer.datacache.config` (the server's settings from the
pod's env, pure), :mod:`~trainer.datacache.deps` (the optional pyarrow / grpcio imports),
:mod:`~trainer.datacache.loader` (reading Parquet / CSV into Arrow),
:mod:`~trainer.datacache.wire` (Flight messages on the gRPC wire),
:mod:`~trainer.datacache.signed` (a Flight client whose calls are signed and whose answers
are proved), :mod:`~trainer.datacache.server` (Flight and grpc.health.v1 on one port) and
:mod:`~trainer.datacache.client` (a rank reads its shard).

Only the server and the client need the ``datacache`` extra (pyarrow, grpcio,
grpcio-health-checking); the core install imports none of it.
"""
