"""The FastAPI admission webhook (AdmissionReview v1) for TrainJobs and runtimes."""
