// Pins the CRDs of the gang schedulers whose PodGroups a TrainJob's runtime can ask for
// (docs/testbed.md): scheduler-plugins' coscheduling PodGroup at the version upstream Trainer
// v2.3.0 is built with, and Volcano's, from the newest Volcano release the module proxy
// serves. No Go code and no programs: only the modules' manifests are read.
module trainer.local/testbed/crds

go 1.26.0

require (
	sigs.k8s.io/scheduler-plugins v0.35.4-devel // indirect
	volcano.sh/volcano v1.10.0 // indirect
)
