"""The executor's controllers: JobSet (:mod:`.jobset`) and batch/v1 Job (:mod:`.job`), each
reading the executor's watch caches and writing through its client; what the JobSet controller
decides is :mod:`.policy`'s."""
