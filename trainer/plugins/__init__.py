"""One module per plugin of the build: ML policies, gang scheduling, the JobSet builder,
data cache and status."""
