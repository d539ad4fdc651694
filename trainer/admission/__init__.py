"""Pure validation and defaulting of TrainJobs and runtimes."""
